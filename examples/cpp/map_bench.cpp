// The per-event cost of handing a 64-column SoA table to libtorch as 64 tensors, side by side
// in one run: zerohop's C ABI (map + 64 DLPack exports + at::fromDLPackVersioned), the same
// map as 64 tensors over one shared storage (zerohop_torch.h: one DLPack export of the table's
// buffer), and 64 torch::from_blob calls on precomputed addresses and strides (what a
// hand-written interface such as CMS's does). Prints a Markdown table; median of repeats.
//
//   map_bench [ROWS] [ITERATIONS]

#include <ATen/DLConvertor.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "zerohop.h"
#include "zerohop_torch.h"

namespace {

void must(zh_status status, const char* call) {
  if (status != ZH_OK) {
    std::fprintf(stderr, "%s failed: %s\n", call, zh_last_error());
    std::exit(2);
  }
}

// Median µs per call of each body, measured in interleaved rounds (every body once per round)
// so that a noisy neighbour slows all of them alike instead of whichever ran at that moment.
std::vector<double> median_us(const std::vector<std::function<void()>>& bodies, int iterations,
                              int rounds = 15) {
  std::vector<std::vector<double>> runs(bodies.size());
  for (const auto& body : bodies) body();  // warm-up
  for (int r = 0; r < rounds; ++r) {
    for (size_t b = 0; b < bodies.size(); ++b) {
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) bodies[b]();
      std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
      runs[b].push_back(took.count() / iterations);
    }
  }
  std::vector<double> medians;
  for (auto& times : runs) {
    std::sort(times.begin(), times.end());
    medians.push_back(times[times.size() / 2]);
  }
  return medians;
}

// Median µs of one call of each body, every call timed on its own (an event is one call, as a
// framework's event loop makes it: no loop of thousands to spread a cache miss or an allocation
// over), the bodies taking turns event by event.
std::vector<double> median_per_event_us(const std::vector<std::function<void()>>& bodies,
                                        int events) {
  std::vector<std::vector<double>> runs(bodies.size());
  for (const auto& body : bodies) body();  // warm-up
  for (int e = 0; e < events; ++e) {
    for (size_t b = 0; b < bodies.size(); ++b) {
      auto start = std::chrono::steady_clock::now();
      bodies[b]();
      std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
      runs[b].push_back(took.count());
    }
  }
  std::vector<double> medians;
  for (auto& times : runs) {
    std::sort(times.begin(), times.end());
    medians.push_back(times[times.size() / 2]);
  }
  return medians;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t rows = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1000;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 2000;
  const int columns = 64;

  zh_schema* schema = nullptr;
  must(zh_schema_new(&schema), "zh_schema_new");
  std::string spec;
  for (int c = 0; c < columns; ++c) {
    const std::string name = "c" + std::to_string(c);
    must(zh_schema_add_column(schema, name.c_str(), "float32"), "zh_schema_add_column");
    spec += (c ? "; " : "") + name;
  }
  zh_table* table = nullptr;
  must(zh_table_new(schema, rows, 128, nullptr, &table), "zh_table_new");
  zh_schema_free(schema);

  std::vector<at::Tensor> out;
  out.reserve(columns);
  // The spec is parsed once per job (as CMS builds its TensorCollection once); each event
  // applies it to that event's table.
  zh_map* map = nullptr;
  must(zh_map_new(spec.c_str(), 0, &map), "zh_map_new");
  auto through_zerohop = [&] {
    zh_tensors* tensors = nullptr;
    must(zh_map_apply(map, table, &tensors), "zh_map_apply");
    for (int c = 0; c < columns; ++c) {
      DLManagedTensorVersioned* managed = nullptr;
      must(zh_tensors_export(tensors, c, &managed), "zh_tensors_export");
      out.push_back(at::fromDLPackVersioned(managed));
    }
    zh_tensors_free(tensors);
    out.clear();
  };

  auto shared_storage = [&] {
    zh_tensors* tensors = nullptr;
    must(zh_map_apply(map, table, &tensors), "zh_map_apply");
    zerohop_torch::append_tensors(table, tensors, out);
    zh_tensors_free(tensors);
    out.clear();
  };

  auto map_alone = [&] {
    zh_tensors* tensors = nullptr;
    must(zh_map_apply(map, table, &tensors), "zh_map_apply");
    zh_tensors_free(tensors);
  };

  // The baseline: addresses and strides worked out once, then only from_blob per event.
  std::vector<void*> addresses;
  zh_tensors* once = nullptr;
  must(zh_table_map(table, spec.c_str(), 0, &once), "zh_table_map");
  for (int c = 0; c < columns; ++c) {
    DLManagedTensorVersioned* managed = nullptr;
    must(zh_tensors_export(once, c, &managed), "zh_tensors_export");
    addresses.push_back(managed->dl_tensor.data);
    managed->deleter(managed);
  }
  zh_tensors_free(once);
  const auto options = torch::TensorOptions().dtype(torch::kFloat32);
  const int64_t n = static_cast<int64_t>(rows);
  auto from_blob = [&] {
    for (int c = 0; c < columns; ++c) out.push_back(torch::from_blob(addresses[c], {n, 1}, {1, 1}, options));
    out.clear();
  };

  const auto us = median_us({through_zerohop, shared_storage, from_blob, map_alone}, iterations);
  const double zh = us[0], shared = us[1], blob = us[2], alone = us[3];
  std::printf("| %d columns × %zu rows → %d at::Tensor | µs per event |\n|---|---|\n", columns, rows, columns);
  std::printf("| zerohop C ABI: zh_map_apply + 64 × (zh_tensors_export + at::fromDLPackVersioned) | %.2f |\n", zh);
  std::printf("| zerohop C ABI, one shared storage: zh_map_apply + zh_table_export + 64 × (zh_tensors_view + TensorImpl) | %.2f |\n", shared);
  std::printf("| 64 × torch::from_blob on precomputed addresses (no ownership, no validation) | %.2f |\n", blob);
  std::printf("| of which zerohop's map alone: zh_map_apply + zh_tensors_free | %.2f |\n", alone);
  std::printf("| ratio zerohop / from_blob | %.2f× (shared storage: %.2f×) |\n", zh / blob, shared / blob);
  const auto each = median_per_event_us({through_zerohop, shared_storage, from_blob, map_alone},
                                        iterations * 15);
  std::printf("\nEach event timed on its own (median of %d events per body, taking turns):\n\n",
              iterations * 15);
  std::printf("| body | µs per event |\n|---|---|\n");
  std::printf("| zerohop C ABI, DLPack per tensor | %.2f |\n", each[0]);
  std::printf("| zerohop C ABI, one shared storage | %.2f |\n", each[1]);
  std::printf("| 64 × torch::from_blob | %.2f |\n", each[2]);
  std::printf("| zerohop's map alone | %.2f |\n", each[3]);
  std::printf("| ratio shared storage / from_blob | %.2f× |\n", each[1] / each[2]);
  zh_map_free(map);
  zh_table_free(table);
  return 0;
}
