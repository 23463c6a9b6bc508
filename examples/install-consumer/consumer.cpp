// A C++ program outside zerohop's tree, built from an installed prefix alone: zerohop.h from
// C++, every handle owned by a std::unique_ptr, and a map's shape and strides read through
// zh_tensors_view. Exits 0 when it all works.
#include <cstdio>
#include <memory>

#include "zerohop.h"

namespace {

template <auto Free>
struct Deleter {
  template <class T>
  void operator()(T* handle) const { Free(handle); }
};
using Schema = std::unique_ptr<zh_schema, Deleter<zh_schema_free>>;
using Table = std::unique_ptr<zh_table, Deleter<zh_table_free>>;
using Tensors = std::unique_ptr<zh_tensors, Deleter<zh_tensors_free>>;

bool failed(zh_status status, const char* call) {
  if (status == ZH_OK) return false;
  std::fprintf(stderr, "consumer_cpp: %s: %s\n", call, zh_last_error());
  return true;
}

}  // namespace

int main() {
  zh_schema* schema_out = nullptr;
  if (failed(zh_schema_new(&schema_out), "zh_schema_new")) return 1;
  const Schema schema(schema_out);
  if (failed(zh_schema_add_column(schema.get(), "pt", "float32"), "zh_schema_add_column") ||
      failed(zh_schema_add_column(schema.get(), "eta", "float32"), "zh_schema_add_column")) {
    return 1;
  }
  zh_table* table_out = nullptr;
  if (failed(zh_table_new(schema.get(), 100, 128, nullptr, &table_out), "zh_table_new")) return 1;
  const Table table(table_out);
  zh_tensors* tensors_out = nullptr;
  if (failed(zh_table_map(table.get(), "kin: pt, eta", 0, &tensors_out), "zh_table_map")) return 1;
  const Tensors tensors(tensors_out);
  zh_tensor_view view{};
  if (failed(zh_tensors_view(tensors.get(), 0, &view), "zh_tensors_view")) return 1;
  // 100 float32 rows take 400 bytes, padded to 512: the columns lie 128 elements apart.
  if (view.ndim != 2 || view.shape[0] != 100 || view.shape[1] != 2 || view.strides[0] != 1 ||
      view.strides[1] != 128) {
    std::fprintf(stderr, "consumer_cpp: kin is not a (100, 2) view with strides (1, 128)\n");
    return 1;
  }
  std::printf("zerohop %s: kin (100, 2), strides (1, 128)\n", zh_version());
  return 0;
}
