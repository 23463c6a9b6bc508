#pragma once

// A mapped table as at::Tensors that share one libtorch storage: the table's buffer, exported
// once (zh_table_export), owns the memory, and each tensor is a TensorImpl over that storage at
// its own offset with zerohop's shape and strides (zh_tensors_view). Per event this costs one
// DLPack deleter instead of one per tensor. Copies (ZH_MAP_ALLOW_COPY) live outside the table's
// buffer and go through their own DLPack export.

#include <ATen/DLConvertor.h>
#include <c10/core/TensorImpl.h>
#include <torch/types.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "zerohop.h"

namespace zerohop_torch {

inline void must(zh_status status, const char* call) {
  if (status != ZH_OK) throw std::runtime_error(std::string(call) + ": " + zh_last_error());
}

// The table's whole buffer as a uint8 at::Tensor: its storage owns the table's memory.
inline at::Tensor whole_table(const zh_table* table) {
  DLManagedTensorVersioned* managed = nullptr;
  must(zh_table_export(table, &managed), "zh_table_export");
  return at::fromDLPackVersioned(managed);
}

// Tensor `index` of `tensors` over `table_storage` (whole_table of the table they map).
inline at::Tensor view_of(const at::Tensor& table_storage, const zh_tensors* tensors, size_t index) {
  zh_tensor_view v{};
  must(zh_tensors_view(tensors, index, &v), "zh_tensors_view");
  if (v.copied) {
    DLManagedTensorVersioned* managed = nullptr;
    must(zh_tensors_export(tensors, index, &managed), "zh_tensors_export");
    return at::fromDLPackVersioned(managed);
  }
  const at::ScalarType type = at::toScalarType(DLDataType{v.dtype_code, v.dtype_bits, v.dtype_lanes});
  const auto itemsize = static_cast<ptrdiff_t>(c10::elementSize(type));
  const ptrdiff_t bytes = static_cast<const char*>(v.data) - static_cast<const char*>(table_storage.data_ptr());
  // One past the last byte the tensor touches (zerohop's strides are never negative).
  ptrdiff_t end = bytes + itemsize;
  for (int d = 0; d < v.ndim; ++d) {
    if (v.shape[d] == 0) end = bytes;  // an empty tensor touches nothing
  }
  for (int d = 0; d < v.ndim && end > bytes; ++d) end += (v.shape[d] - 1) * v.strides[d] * itemsize;
  if (bytes < 0 || bytes % itemsize != 0 || end > table_storage.numel()) {
    throw std::runtime_error("zh_tensors_view: tensor " + std::to_string(index) +
                             " is not whole elements inside the given table's buffer");
  }
  const c10::DispatchKey key = table_storage.is_cuda() ? c10::DispatchKey::CUDA : c10::DispatchKey::CPU;
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(table_storage.storage()),
                                                          c10::DispatchKeySet(key),
                                                          c10::scalarTypeToTypeMeta(type));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(c10::IntArrayRef(v.shape, v.ndim),
                                                 c10::IntArrayRef(v.strides, v.ndim), bytes / itemsize);
  return t;
}

// Every tensor of `tensors` (a map applied to `table`), in the map's order, appended to `out`.
inline void append_tensors(const zh_table* table, const zh_tensors* tensors, std::vector<at::Tensor>& out) {
  const at::Tensor storage = whole_table(table);
  for (size_t i = 0; i < zh_tensors_len(tensors); ++i) out.push_back(view_of(storage, tensors, i));
}

}  // namespace zerohop_torch
