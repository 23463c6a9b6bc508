// A libtorch program outside zerohop's tree, built from an installed prefix alone:
// zerohop_torch.h's tensors share the table's one storage, so a write through a mapped tensor
// is seen through the column's own DLPack export. Exits 0 when it all works.
#include <cstdio>
#include <vector>

#include "zerohop_torch.h"

int main() {
  using zerohop_torch::must;
  zh_schema* schema = nullptr;
  zh_table* table = nullptr;
  zh_tensors* tensors = nullptr;
  must(zh_schema_new(&schema), "zh_schema_new");
  must(zh_schema_add_column(schema, "pt", "float32"), "zh_schema_add_column");
  must(zh_schema_add_column(schema, "eta", "float32"), "zh_schema_add_column");
  must(zh_table_new(schema, 100, 128, nullptr, &table), "zh_table_new");
  must(zh_table_map(table, "kin: pt, eta", 0, &tensors), "zh_table_map");
  std::vector<at::Tensor> mapped;
  zerohop_torch::append_tensors(table, tensors, mapped);
  const at::Tensor kin = mapped.at(0);
  kin.select(1, 1).fill_(2.5);
  DLManagedTensorVersioned* managed = nullptr;
  must(zh_table_column(table, "eta", &managed), "zh_table_column");
  const at::Tensor eta = at::fromDLPackVersioned(managed);
  zh_tensors_free(tensors);
  zh_table_free(table);
  zh_schema_free(schema);
  const bool ok = kin.sizes() == at::IntArrayRef({100, 2}) &&
                  kin.strides() == at::IntArrayRef({1, 128}) &&
                  eta.data_ptr() == kin.select(1, 1).data_ptr() &&
                  eta.sum().item<float>() == 250.0f;
  if (!ok) {
    std::fprintf(stderr, "torch_consumer: kin is not a view of the table's eta column\n");
    return 1;
  }
  std::printf("zerohop %s: kin (100, 2) over the table's storage, eta written through it\n",
              zh_version());
  return 0;
}
