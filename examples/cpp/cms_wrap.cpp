// The CMS flow with memory zerohop never allocated: the program lays out a track SoA by CMS's
// rules itself (as GENERATE_SOA_LAYOUT does), allocates it itself (std::aligned_alloc, or
// cudaMalloc on "cuda"), fills it, and zerohop only wraps it: batches of rows mapped to
// libtorch tensors over that very memory, a TorchScript model run on each batch (on a stream of
// its own on the GPU), the scores written into an output SoA the program also owns. The
// release callbacks tell the program when its buffers are free.
//
//   cms_wrap MODEL.pt [cpu|cuda] [ROWS] [BATCH] [MODEL.pt2]
//
// With MODEL.pt2 (an AOTInductor package of the same model, examples/cpp/make_model.py
// --aoti), every batch's views also go through AOTIModelPackageLoader, which must score them
// as TorchScript does. A package runs with the strides it was exported with and checks none,
// so the table's pitch must be the one written beside it (MODEL.pt2.pitch).
//
// The SoA, in declaration order, every column and every Eigen component padded to 128 bytes:
//   SOA_SCALAR(float, bField)
//   SOA_COLUMN(float, pt), SOA_COLUMN(float, eta), SOA_COLUMN(float, phi)
//   SOA_EIGEN_COLUMN(Eigen::Vector3f, position)
//   SOA_EIGEN_COLUMN(Eigen::Matrix3f, covariance)       (column-major, Eigen's default)
// Exits 0 when every check passes.

#include <torch/script.h>
#include <ATen/DLConvertor.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fstream>

#include "checks.h"
#include "zerohop.h"
#if __has_include(<torch/csrc/inductor/aoti_package/model_package_loader.h>)
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#define ZH_AOTI 1
#endif
#ifdef ZH_CMS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace {

using zh_example::check;
using zh_example::failures;
using zh_example::must;

constexpr size_t kAlign = 128;

size_t padded(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Where each column starts, by CMS's rules, computed here and not asked of zerohop.
struct Layout {
  size_t bfield, pt, eta, phi, position, covariance, pitch, bytes;
  explicit Layout(size_t rows) {
    pitch = padded(rows * sizeof(float));  // one column or one Eigen component
    bfield = 0;
    pt = padded(sizeof(float));
    eta = pt + pitch;
    phi = eta + pitch;
    position = phi + pitch;
    covariance = position + 3 * pitch;
    bytes = covariance + 9 * pitch;
  }
};

// The program's own memory, and how often zerohop gave it back.
struct Owned {
  void* data = nullptr;
  bool on_cuda = false;
  int releases = 0;
};

void give_back(void* ctx) {
  auto* owned = static_cast<Owned*>(ctx);
#ifdef ZH_CMS_CUDA
  if (owned->on_cuda) {
    cudaFree(owned->data);
  } else
#endif
  {
    std::free(owned->data);
  }
  ++owned->releases;
}

bool allocate(Owned& owned, size_t bytes, bool on_cuda) {
  owned.on_cuda = on_cuda;
#ifdef ZH_CMS_CUDA
  if (on_cuda) return cudaMalloc(&owned.data, bytes) == cudaSuccess;
#endif
  if (on_cuda) return false;
  owned.data = std::aligned_alloc(kAlign, bytes);
  return owned.data != nullptr;
}

void upload(Owned& owned, const std::vector<float>& host) {
#ifdef ZH_CMS_CUDA
  if (owned.on_cuda) {
    cudaMemcpy(owned.data, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
    return;
  }
#endif
  std::memcpy(owned.data, host.data(), host.size() * sizeof(float));
}

at::Tensor export_tensor(zh_tensors* tensors, size_t i) {
  DLManagedTensorVersioned* managed = nullptr;
  must(zh_tensors_export(tensors, i, &managed), "zh_tensors_export");
  return at::fromDLPackVersioned(managed);
}

#ifdef ZH_CMS_CUDA
// Hand-offs while a CUDA graph is being captured, from C (docs/handoff.md): a map applied for
// the capturing stream leaves the capture valid (the wait becomes a node of the graph, which
// then runs), and data produced inside the capture is refused for a stream outside it, by
// name, the capture intact.
void check_capture(zh_map* map, zh_table* tracks, size_t batch) {
  cudaStream_t capture = nullptr, outside = nullptr;
  cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&outside, cudaStreamNonBlocking);
  const auto handle = [](cudaStream_t s) { return reinterpret_cast<uintptr_t>(s); };
  zh_table* rows = nullptr;
  must(zh_table_rows(tracks, 0, batch, &rows), "zh_table_rows");
  cudaStreamBeginCapture(capture, cudaStreamCaptureModeGlobal);
  zh_tensors *inside = nullptr, *refused = nullptr;
  const zh_status applied = zh_map_apply_on_stream(map, tracks, handle(capture), &inside);
  must(zh_table_set_stream(rows, handle(capture)), "zh_table_set_stream");
  const zh_status across = zh_map_apply_on_stream(map, rows, handle(outside), &refused);
  const std::string says = zh_last_error();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  const bool ended = cudaStreamEndCapture(capture, &graph) == cudaSuccess;
  const bool runs = ended && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess &&
                    cudaGraphLaunch(exec, capture) == cudaSuccess &&
                    cudaStreamSynchronize(capture) == cudaSuccess;
  check(applied == ZH_OK && inside != nullptr && runs,
        "a map applied for a capturing stream leaves the capture valid, and the graph runs");
  check(across == ZH_INVALID_ARGUMENT && refused == nullptr &&
            says.find("inside a CUDA graph capture") != std::string::npos,
        "data produced inside a capture is refused for a stream outside it: " + says);
  zh_tensors_free(inside);
  zh_table_free(rows);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaStreamDestroy(capture);
  cudaStreamDestroy(outside);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.pt [cpu|cuda] [ROWS] [BATCH] [MODEL.pt2]\n", argv[0]);
    return 2;
  }
  const std::string device = argc > 2 ? argv[2] : "cpu";
  const size_t rows = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 10000;
  const size_t batch = argc > 4 ? std::strtoul(argv[4], nullptr, 10) : 1000;
  const std::string aoti_package = argc > 5 ? argv[5] : "";
  const bool on_cuda = device == "cuda";
#ifndef ZH_CMS_CUDA
  if (on_cuda) {
    std::fprintf(stderr, "built without the CUDA runtime's headers: cpu only\n");
    return 2;
  }
#endif
  const torch::Device torch_device = on_cuda ? torch::Device("cuda:0") : torch::Device("cpu");
  const int zh_device = on_cuda ? 0 : -1;

  // zerohop's allocations are counted from here on: wrapping must add none.
  zh_resource *upstream = nullptr, *stats = nullptr;
  if (on_cuda) {
    must(zh_resource_cuda_device(0, &upstream), "zh_resource_cuda_device");
  } else {
    must(zh_resource_system(&upstream), "zh_resource_system");
  }
  must(zh_resource_stats(upstream, &stats), "zh_resource_stats");
  must(zh_resource_set_current(stats), "zh_resource_set_current");

  // The program's SoA: laid out, allocated and filled without zerohop.
  const Layout layout(rows);
  std::vector<float> host(layout.bytes / sizeof(float), 0.0f);
  auto at = [&](size_t offset, size_t row) -> float& { return host[(offset / 4) + row]; };
  at(layout.bfield, 0) = 3.8f;
  for (size_t r = 0; r < rows; ++r) {
    at(layout.pt, r) = 1.0f + 0.001f * r;
    at(layout.eta, r) = -2.0f + 4.0f * r / rows;
    at(layout.phi, r) = 0.5f;
    for (size_t k = 0; k < 3; ++k) at(layout.position + k * layout.pitch, r) = r + 0.1f * k;
    for (size_t i = 0; i < 3; ++i)
      for (size_t j = 0; j < 3; ++j)  // element (i, j) is component j * 3 + i (column-major)
        at(layout.covariance + (j * 3 + i) * layout.pitch, r) = (i == j ? 1.0f : 0.01f * (i + j));
  }
  Owned input, output;
  check(allocate(input, layout.bytes, on_cuda), "the program allocated its SoA (" +
                                                    std::to_string(layout.bytes) + " bytes)");
  upload(input, host);
  const size_t output_bytes = padded(rows * sizeof(float));
  check(allocate(output, output_bytes, on_cuda), "and its output SoA");

  zh_schema *in_schema = nullptr, *out_schema = nullptr;
  must(zh_schema_new(&in_schema), "zh_schema_new");
  must(zh_schema_add_scalar(in_schema, "bField", "float32"), "bField");
  for (const char* name : {"pt", "eta", "phi"}) must(zh_schema_add_column(in_schema, name, "float32"), name);
  must(zh_schema_add_vector(in_schema, "position", "float32", 3), "position");
  must(zh_schema_add_matrix(in_schema, "covariance", "float32", 3, 3, ZH_COLUMN_MAJOR), "covariance");
  must(zh_schema_new(&out_schema), "zh_schema_new");
  must(zh_schema_add_column(out_schema, "score", "float32"), "score");

  const zh_statistics before = [&] {
    zh_statistics s{};
    must(zh_resource_statistics(stats, &s), "zh_resource_statistics");
    return s;
  }();
  zh_table *tracks = nullptr, *scores = nullptr;
  must(zh_table_wrap(in_schema, rows, kAlign, input.data, layout.bytes, zh_device, give_back, &input,
                     &tracks), "zh_table_wrap");
  must(zh_table_wrap(out_schema, rows, kAlign, output.data, output_bytes, zh_device, give_back,
                     &output, &scores), "zh_table_wrap");

  // zerohop's layout is the program's, column by column.
  const std::pair<const char*, size_t> offsets[] = {
      {"bField", layout.bfield}, {"pt", layout.pt}, {"eta", layout.eta}, {"phi", layout.phi},
      {"position", layout.position}, {"covariance", layout.covariance}};
  bool same_layout = true;
  for (const auto& [name, offset] : offsets) {
    zh_column_info info{};
    must(zh_table_column_info(tracks, name, &info), name);
    same_layout &= info.offset == offset && (info.kind == 0 || info.pitch * 4 == layout.pitch);
  }
  check(same_layout, "zerohop finds every column where CMS's rules put it");
  uintptr_t produced_on = 99;
  must(zh_table_get_stream(tracks, &produced_on), "zh_table_get_stream");
  check(produced_on == (on_cuda ? 1u : 0u),
        "the wrapped table is produced on the legacy default stream (no stream on the host)");

  torch::jit::script::Module model = torch::jit::load(argv[1]);
  model.to(torch_device);
  model.eval();
  torch::NoGradGuard no_grad;

  zh_map* map = nullptr;
  must(zh_map_new("kin: pt, eta, phi; position; covariance", ZH_MAP_READONLY, &map), "zh_map_new");
#ifdef ZH_CMS_CUDA
  std::optional<c10::cuda::CUDAStreamGuard> on_stream;
  if (on_cuda) on_stream.emplace(c10::cuda::getStreamFromPool());
#endif
  bool views = true, in_place = true;
  size_t batches = 0;
  const char* base = static_cast<const char*>(input.data);
  for (size_t start = 0; start < rows; start += batch) {
    const size_t stop = std::min(rows, start + batch);
    zh_table *in_batch = nullptr, *out_batch = nullptr;
    must(zh_table_rows(tracks, start, stop, &in_batch), "zh_table_rows");
    must(zh_table_rows(scores, start, stop, &out_batch), "zh_table_rows");
    zh_tensors* tensors = nullptr;
    uintptr_t model_stream = 0;
#ifdef ZH_CMS_CUDA
    if (on_cuda) model_stream = reinterpret_cast<uintptr_t>(c10::cuda::getCurrentCUDAStream().stream());
#endif
    // The batch's tensors, to be read on the model's stream: it waits (on the device, not the
    // host) for the stream the program's data was produced on.
    must(zh_map_apply_on_stream(map, in_batch, model_stream, &tensors), "zh_map_apply_on_stream");
    std::vector<torch::jit::IValue> inputs;
    for (size_t i = 0; i < zh_tensors_len(tensors); ++i) inputs.emplace_back(export_tensor(tensors, i));
    const at::Tensor kin = inputs[0].toTensor(), position = inputs[1].toTensor(),
                     covariance = inputs[2].toTensor();
    views &= kin.data_ptr() == base + layout.pt + start * 4 &&
             position.data_ptr() == base + layout.position + start * 4 &&
             covariance.data_ptr() == base + layout.covariance + start * 4 &&
             kin.device() == torch_device && covariance.sizes()[1] == 3;
    const at::Tensor result = model.forward(inputs).toTensor();
    // The output SoA's rows of this batch, a libtorch view of the program's memory: the scores
    // are copied into it (as CMS does today), on the same stream.
    DLManagedTensorVersioned* managed = nullptr;
    must(zh_table_column(out_batch, "score", &managed), "zh_table_column");
    at::Tensor out = at::fromDLPackVersioned(managed);
    in_place &= out.data_ptr() == static_cast<char*>(output.data) + start * 4;
    out.copy_(result);
    zh_tensors_free(tensors);
    zh_table_free(in_batch);
    zh_table_free(out_batch);
    ++batches;
  }
#ifdef ZH_CMS_CUDA
  if (on_cuda) c10::cuda::getCurrentCUDAStream().synchronize();
  on_stream.reset();
#endif
  check(views, std::to_string(batches) + " batches: every tensor is a view of the program's buffer");
  check(in_place, "every batch's scores landed in the program's output buffer");
#ifdef ZH_CMS_CUDA
  if (on_cuda) check_capture(map, tracks, batch);
#endif

  if (!aoti_package.empty()) {
#ifdef ZH_AOTI
    size_t exported_pitch = 0;
    std::ifstream(aoti_package + ".pitch") >> exported_pitch;
    check(exported_pitch * sizeof(float) == layout.pitch,
          "the AOTInductor package was exported for this table's pitch (" +
              std::to_string(exported_pitch) + " elements)");
    if (exported_pitch * sizeof(float) == layout.pitch) {
      torch::inductor::AOTIModelPackageLoader aoti(aoti_package);
      bool same = true, aoti_views = true;
      for (size_t start = 0; start < rows; start += batch) {
        zh_table* in_batch = nullptr;
        must(zh_table_rows(tracks, start, std::min(rows, start + batch), &in_batch), "zh_table_rows");
        zh_tensors* tensors = nullptr;
        must(zh_map_apply(map, in_batch, &tensors), "zh_map_apply");
        std::vector<at::Tensor> inputs;
        std::vector<torch::jit::IValue> scripted;
        for (size_t i = 0; i < zh_tensors_len(tensors); ++i) {
          inputs.push_back(export_tensor(tensors, i));
          scripted.emplace_back(inputs.back());
        }
        aoti_views &= inputs[0].data_ptr() == base + layout.pt + start * 4;
        const at::Tensor compiled = aoti.run(inputs).at(0);
        same &= torch::allclose(compiled.reshape(-1), model.forward(scripted).toTensor(), 1e-5, 1e-6);
        zh_tensors_free(tensors);
        zh_table_free(in_batch);
      }
      check(aoti_views && same,
            "an AOTInductor package scores every batch's views (no copy) as TorchScript does");
    }
#else
    check(false, "this libtorch has no AOTInductor package loader");
#endif
  }

  // The batches agree with one pass over the whole table (its tensors kept for below).
  zh_tensors* whole = nullptr;
  must(zh_map_apply(map, tracks, &whole), "zh_map_apply");
  std::vector<torch::jit::IValue> all;
  for (size_t i = 0; i < zh_tensors_len(whole); ++i) all.emplace_back(export_tensor(whole, i));
  zh_tensors_free(whole);
  {
    const at::Tensor expected = model.forward(all).toTensor();
    DLManagedTensorVersioned* managed = nullptr;
    must(zh_table_column(scores, "score", &managed), "zh_table_column");
    const at::Tensor written = at::fromDLPackVersioned(managed);
    check(torch::allclose(written, expected), "the batched scores equal one pass over all rows");
  }

  zh_statistics after{};
  must(zh_resource_statistics(stats, &after), "zh_resource_statistics");
  check(after.total_count == before.total_count && after.total_bytes == before.total_bytes,
        "zerohop allocated nothing for the inputs or the outputs (" +
            std::to_string(after.total_bytes - before.total_bytes) + " bytes)");

  // The program hears once, when the last view of each buffer is gone.
  zh_map_free(map);
  zh_table_free(tracks);
  zh_table_free(scores);
  zh_schema_free(in_schema);
  zh_schema_free(out_schema);
  check(input.releases == 0 && output.releases == 1,
        "the input stays while libtorch holds tensors of it; the output went with its table");
  all.clear();
  check(input.releases == 1, "and the input goes back when the last tensor dies");
  zh_resource_free(stats);
  zh_resource_free(upstream);

  std::printf("%s: %d failed checks, %zu rows in batches of %zu on %s\n",
              failures ? "FAILED" : "passed", failures, rows, batch, device.c_str());
  return failures ? 1 : 0;
}
