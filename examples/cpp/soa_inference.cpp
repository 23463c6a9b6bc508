// The CMS path without Python: an SoA table of tracks built through zerohop's C ABI, its
// columns handed to libtorch as strided views (DLPack, no copy), a TorchScript model run on
// them, and the scores written back into the table's output column.
//
//   soa_inference MODEL.pt [cpu|cuda] [ROWS]
//
// Every hand-off is checked: each at::Tensor's data pointer must lie in the table's one
// buffer, with the strides zerohop computed; the score column must hold what the model said.
// On "cuda" the table lives in device memory from a zerohop pool and the pool's statistics
// show that nothing went through host memory. Built with ZH_TORCH_CUDA_ALLOCATOR (run.sh does
// when the CUDA runtime's headers are at hand), libtorch's own CUDA tensors come from that pool
// too: one pool for the host framework's tables and for libtorch. Exits 0 when every check
// passes.

#include <ATen/DLConvertor.h>
#include <torch/jit.h>
#include <torch/script.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "checks.h"
#include "zerohop.h"
#include "zerohop_torch.h"
#ifdef ZH_TORCH_CUDA_ALLOCATOR
#include "torch_cuda_allocator.h"
#endif

namespace {

using zh_example::check;
using zh_example::failures;
using zh_example::must;

// A column or mapped tensor as an at::Tensor over the table's memory: libtorch takes over the
// managed tensor and calls its deleter when the tensor dies.
at::Tensor column(const zh_table* table, const char* name) {
  DLManagedTensorVersioned* managed = nullptr;
  must(zh_table_column(table, name, &managed), name);
  return at::fromDLPackVersioned(managed);
}

zh_statistics statistics(const zh_resource* stats) {
  zh_statistics counted{};
  must(zh_resource_statistics(stats, &counted), "zh_resource_statistics");
  return counted;
}

bool inside(const at::Tensor& t, const zh_table_info& info) {
  auto at = reinterpret_cast<uintptr_t>(t.data_ptr());
  auto start = reinterpret_cast<uintptr_t>(info.data);
  return at >= start && at < start + info.nbytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.pt [cpu|cuda] [ROWS]\n", argv[0]);
    return 2;
  }
  const std::string device = argc > 2 ? argv[2] : "cpu";
  const size_t rows = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 1000;
  const bool on_cuda = device == "cuda";
  const torch::Device torch_device = on_cuda ? torch::Device("cuda:0") : torch::Device("cpu");

  // Track-like rows: pt, eta, phi; a 3-vector position; a 3x3 covariance; the score.
  zh_schema* schema = nullptr;
  must(zh_schema_new(&schema), "zh_schema_new");
  for (const char* name : {"pt", "eta", "phi"}) must(zh_schema_add_column(schema, name, "float32"), name);
  must(zh_schema_add_vector(schema, "position", "float32", 3), "position");
  must(zh_schema_add_matrix(schema, "covariance", "float32", 3, 3, ZH_ROW_MAJOR), "covariance");
  must(zh_schema_add_column(schema, "score", "float32"), "score");

  // Memory: the host default, or a pool over device memory counted by a Stats adaptor.
  zh_resource *upstream = nullptr, *pool = nullptr, *stats = nullptr;
  if (on_cuda) {
    must(zh_resource_cuda_device(0, &upstream), "zh_resource_cuda_device");
    must(zh_resource_pool(upstream, 64 << 20, 0, &pool), "zh_resource_pool");
    must(zh_resource_stats(pool, &stats), "zh_resource_stats");
#ifdef ZH_TORCH_CUDA_ALLOCATOR
    // Before libtorch's first CUDA tensor: from here on it allocates from the counted pool.
    must(zh_resource_set_current(stats), "zh_resource_set_current");
    check(install_zerohop_cuda_allocator(), "libtorch's CUDA allocator is zerohop's pool");
#endif
  }
  zh_table* table = nullptr;
  must(zh_table_new(schema, rows, 128, stats, &table), "zh_table_new");
  zh_schema_free(schema);
  zh_table_info info{};
  must(zh_table_get_info(table, &info), "zh_table_get_info");
  check(info.device_type == (on_cuda ? 2 : 1), "the table is on " + device);

  // Fill the inputs in place through libtorch views of the columns.
  torch::manual_seed(1);
  const auto options = torch::TensorOptions().device(torch_device);
  for (const char* name : {"pt", "eta", "phi", "position", "covariance"}) {
    at::Tensor view = column(table, name);
    check(inside(view, info), std::string(name) + " is a view of the table's buffer");
    view.copy_(torch::rand(view.sizes(), options));
  }

  // The map: one tensor per model input, strides computed by zerohop.
  zh_tensors* tensors = nullptr;
  must(zh_table_map(table, "kin: pt, eta, phi; position; covariance", ZH_MAP_READONLY, &tensors),
       "zh_table_map");
  std::vector<torch::jit::IValue> inputs;
  for (size_t i = 0; i < zh_tensors_len(tensors); ++i) {
    DLManagedTensorVersioned* managed = nullptr;
    must(zh_tensors_export(tensors, i, &managed), "zh_tensors_export");
    const int64_t* strides = managed->dl_tensor.strides;
    std::vector<int64_t> expected(strides, strides + managed->dl_tensor.ndim);
    void* data = managed->dl_tensor.data;
    at::Tensor t = at::fromDLPackVersioned(managed);
    const std::string name = zh_tensors_name(tensors, i);
    check(t.data_ptr() == data && inside(t, info), name + ": libtorch holds the table's memory");
    check(t.strides().vec() == expected && !t.is_contiguous(),
          name + ": strides " + c10::str(t.strides()) + " as zerohop computed them, no copy");
    check(!zh_tensors_copied(tensors, i), name + ": not a copy");
    inputs.emplace_back(t);
  }
  // The same tensors sharing one libtorch storage that owns the table (zerohop_torch.h):
  // identical views, one DLPack deleter for all of them.
  std::vector<at::Tensor> shared;
  zerohop_torch::append_tensors(table, tensors, shared);
  bool same = shared.size() == inputs.size();
  for (size_t i = 0; same && i < shared.size(); ++i) {
    const at::Tensor& dl = inputs[i].toTensor();
    same = shared[i].data_ptr() == dl.data_ptr() && shared[i].strides() == dl.strides() &&
           shared[i].sizes() == dl.sizes() && shared[i].dtype() == dl.dtype() &&
           shared[i].device() == dl.device() && shared[i].storage().is_alias_of(shared[0].storage());
  }
  check(same, "one shared storage gives the same views (pointers, sizes, strides, dtype, device)");
  zh_tensors_free(tensors);
  const at::Tensor kin = inputs[0].toTensor();
  check(kin.sizes() == at::IntArrayRef({static_cast<int64_t>(rows), 3}), "kin is (rows, 3)");
  check(inputs[2].toTensor().sizes() == at::IntArrayRef({static_cast<int64_t>(rows), 3, 3}),
        "covariance is (rows, 3, 3)");

  torch::jit::script::Module model = torch::jit::load(argv[1]);
  model.to(torch_device);
  model.eval();
  torch::NoGradGuard no_grad;
  const at::Tensor scores = model.forward(inputs).toTensor();
  check(scores.device() == torch_device, "the model ran on " + device);

  // Const inputs without a copy (ZH_MAP_GUARD_CONST): fingerprinted when mapped, checked
  // after the model. The scorer only reads; a TorchScript function that writes into its input
  // (libtorch lets it: pytorch#97856) is caught after it ran, and the column named.
  {
    zh_tensors* guarded = nullptr;
    must(zh_table_map(table, "kin: pt, eta, phi; position; covariance", ZH_MAP_GUARD_CONST,
                      &guarded),
         "zh_table_map(ZH_MAP_GUARD_CONST)");
    std::vector<at::Tensor> views;
    zerohop_torch::append_tensors(table, guarded, views);
    const uintptr_t stream = on_cuda ? 1 : 0;  // libtorch's default stream: the legacy one
    model.forward(std::vector<torch::jit::IValue>(views.begin(), views.end()));
    check(zh_tensors_verify_unwritten(guarded, stream) == ZH_OK,
          "a model that only reads its const inputs passes the guard");
    const float kept = views[0][3][1].item<float>();
    auto writer = torch::jit::compile("def forward(kin):\n    kin[3, 1] += 1.0\n    return kin\n");
    writer->run_method("forward", views[0]);
    const zh_status caught = zh_tensors_verify_unwritten(guarded, stream);
    check(caught == ZH_READ_ONLY &&
              std::string(zh_last_error()).find("column \"eta\" was written") != std::string::npos,
          std::string("a TorchScript function writing its const input is caught: ") +
              zh_last_error());
    views[0][3][1].fill_(kept);
    check(zh_tensors_verify_unwritten(guarded, stream) == ZH_OK, "put back, the guard passes");
    zh_tensors_free(guarded);
  }

  // The scores land in the table's output column (validated: dtype, shape, device).
  must(zh_table_write_column(table, "score", at::toDLPackVersioned(scores)), "zh_table_write_column");
  const at::Tensor score = column(table, "score");
  check(inside(score, info) && torch::equal(score, scores), "the score column holds the model's output");

  // Bad input is a status and a message, never a crash.
  const zh_status wrong =
      zh_table_write_column(table, "score", at::toDLPackVersioned(scores.to(torch::kFloat64)));
  check(wrong == ZH_INVALID_ARGUMENT && std::string(zh_last_error()).find("float64") != std::string::npos,
        std::string("a float64 output is refused: ") + zh_last_error());
  DLManagedTensorVersioned* none = nullptr;
  const zh_status unknown = zh_table_column(table, "nope", &none);
  check(unknown == ZH_NOT_FOUND && none == nullptr,
        std::string("an unknown column is ZH_NOT_FOUND: ") + zh_last_error());
  const zh_status null_table = zh_table_map(nullptr, "pt", 0, &tensors);
  check(null_table == ZH_INVALID_ARGUMENT, std::string("a NULL table is refused: ") + zh_last_error());

  if (on_cuda) {
    const zh_statistics counted = statistics(stats);
#ifdef ZH_TORCH_CUDA_ALLOCATOR
    // A tensor libtorch makes is counted by the pool while it lives, and given back after.
    const int64_t probe_bytes = 4 << 20;
    {
      const at::Tensor probe = torch::empty({probe_bytes}, options.dtype(torch::kUInt8));
      const zh_statistics with_probe = statistics(stats);
      check(with_probe.total_count == counted.total_count + 1 &&
                with_probe.current_bytes >= counted.current_bytes + probe_bytes,
            "a tensor libtorch makes comes from the pool (" +
                std::to_string(with_probe.current_bytes - counted.current_bytes) + " bytes)");
    }
    check(statistics(stats).current_bytes == counted.current_bytes,
          "and goes back to it when it dies");
    check(counted.total_count > 1,
          "libtorch's weights, intermediates and outputs came from the pool too (" +
              std::to_string(counted.total_count - 1) + " allocations beside the table, peak " +
              std::to_string(counted.peak_bytes) + " bytes)");
#else
    check(counted.total_count == 1 && counted.current_bytes == info.nbytes,
          "the pool served the table and nothing else (" + std::to_string(counted.current_bytes) +
              " bytes)");
#endif
  }

  // The table handle may go first: the views keep its memory alive.
  zh_table_free(table);
  check(torch::equal(score, scores), "views outlive the table handle");
  for (zh_resource* r : {stats, pool, upstream}) zh_resource_free(r);

  std::printf("%s: %d failed checks, %zu rows on %s\n", failures ? "FAILED" : "passed", failures,
              rows, device.c_str());
  return failures ? 1 : 0;
}
