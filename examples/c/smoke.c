/* zerohop's C ABI from plain C11: a table, a column exported through DLPack and read back
 * through the same memory, a map's strides, a bad call's message, and a table over memory this
 * program allocated, given back through its own callback.
 * Built and run by examples/cpp/run.sh (make cpp-example); exits 0 when every check passes. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ATen/dlpack.h> /* any DLPack >= 1.0 header; libtorch ships one */
#include "zerohop.h"

static int failures = 0;

static void check(int ok, const char *what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

static int releases = 0;

static void give_back(void *buffer) {
  free(buffer);
  ++releases;
}

/* 100 rows of (x: float64, v: int32[4]) laid out by the SoA rules at 64 bytes: x takes 832
 * bytes (800 padded), each of v's 4 components 448 (400 padded). */
static void wrapped_memory(void) {
  const size_t rows = 100, bytes = 832 + 4 * 448;
  zh_schema *schema = NULL;
  zh_table *table = NULL, *batch = NULL;
  zh_column_info v;
  DLManagedTensorVersioned *x = NULL;
  unsigned char *buffer = aligned_alloc(64, bytes);
  ((double *)buffer)[42] = 4.25;
  ((int *)(buffer + 832 + 2 * 448))[42] = 7; /* v[42][2] */

  zh_schema_new(&schema);
  zh_schema_add_column(schema, "x", "float64");
  zh_schema_add_vector(schema, "v", "int32", 4);
  check(zh_table_wrap(schema, rows, 64, buffer, bytes, -1, give_back, buffer, &table) == ZH_OK,
        "a table over this program's buffer");
  check(zh_table_column_info(table, "v", &v) == ZH_OK && v.offset == 832 && v.pitch == 112,
        "v lies where the layout rules put it");
  check(zh_table_rows(table, 40, 50, &batch) == ZH_OK, "rows 40..50 as a batch");
  check(zh_table_column(batch, "x", &x) == ZH_OK && x->dl_tensor.shape[0] == 10 &&
            ((double *)x->dl_tensor.data)[2] == 4.25 && (unsigned char *)x->dl_tensor.data ==
            buffer + 40 * sizeof(double),
        "the batch's x is the buffer's rows 40..50");
  zh_table_free(batch);
  zh_table_free(table);
  check(releases == 0, "the buffer is not given back while a tensor uses it");
  x->deleter(x);
  check(releases == 1, "the buffer is given back once, when the last tensor dies");

  buffer = aligned_alloc(64, bytes);
  table = NULL;
  check(zh_table_wrap(schema, rows, 64, buffer, bytes - 1, -1, give_back, buffer, &table) ==
            ZH_INVALID_ARGUMENT && table == NULL && releases == 2,
        "a buffer too small is refused and given back at once");
  check(strstr(zh_last_error(), "bytes") != NULL, zh_last_error());
  zh_schema_free(schema);
}

/* Misuse the header refuses (issue #40): one managed tensor adopted for two columns, and a
 * device number that is neither -1 nor a CUDA device. Under valgrind: nothing freed twice. */
static void refused_misuse(void) {
  zh_schema *schema = NULL;
  zh_table *table = NULL, *adopted = NULL;
  DLManagedTensorVersioned *x = NULL;
  const char *names[2] = {"a", "b"};
  int before = releases;
  unsigned char *buffer = aligned_alloc(128, 128);

  zh_schema_new(&schema);
  zh_schema_add_column(schema, "x", "float64");
  zh_table_new(schema, 8, 0, NULL, &table);
  zh_table_column(table, "x", &x);
  DLManagedTensorVersioned *twice[2] = {x, x};
  check(zh_table_from_columns(names, twice, 2, &adopted) == ZH_INVALID_ARGUMENT &&
            adopted == NULL,
        "one tensor adopted for two columns is refused (its deleter runs once)");
  check(strstr(zh_last_error(), "same managed tensor") != NULL, zh_last_error());
  zh_table_free(table);

  table = NULL;
  check(zh_table_wrap(schema, 8, 0, buffer, 128, -2, give_back, buffer, &table) ==
            ZH_INVALID_ARGUMENT && table == NULL && releases == before + 1,
        "device -2 is refused, not taken for the host, and the buffer given back");
  check(strstr(zh_last_error(), "device") != NULL, zh_last_error());
  zh_schema_free(schema);
}

int main(void) {
  zh_schema *schema = NULL;
  zh_table *table = NULL;
  zh_table_info info;
  DLManagedTensorVersioned *x = NULL, *v = NULL;
  zh_tensors *tensors = NULL;

  check(zh_schema_new(&schema) == ZH_OK, "schema");
  zh_schema_add_column(schema, "x", "float64");
  zh_schema_add_vector(schema, "v", "int32", 4);
  check(zh_table_new(schema, 10, 64, NULL, &table) == ZH_OK, "table of 10 rows");
  zh_schema_free(schema);
  zh_table_get_info(table, &info);

  check(zh_table_column(table, "x", &x) == ZH_OK, "column x exported");
  check(x->dl_tensor.data == info.data, "column x starts the table's buffer");
  check(x->version.major == 1 && x->dl_tensor.ndim == 1 && x->dl_tensor.shape[0] == 10, "x is (10,)");
  ((double *)x->dl_tensor.data)[3] = 2.5;
  check(zh_table_map(table, "x", ZH_MAP_READONLY, &tensors) == ZH_OK, "map of x");
  zh_tensors_export(tensors, 0, &v);
  check(((const double *)v->dl_tensor.data)[3] == 2.5, "a write through one export is seen by another");
  check((v->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0, "the map's export is read-only");
  v->deleter(v);
  zh_tensors_free(tensors);

  check(zh_table_column(table, "v", &v) == ZH_OK, "column v exported");
  /* 10 int32 padded to 64 bytes: a pitch of 16 elements. */
  check(v->dl_tensor.ndim == 2 && v->dl_tensor.strides[0] == 1 && v->dl_tensor.strides[1] == 16,
        "v is (10, 4) with strides (1, 16)");
  v->deleter(v);

  tensors = NULL;
  check(zh_table_map(table, "w: x, v", 0, &tensors) == ZH_INVALID_ARGUMENT && tensors == NULL,
        "a map mixing dtypes is refused");
  check(strstr(zh_last_error(), "mixes") != NULL, zh_last_error());

  zh_table_free(table);
  x->deleter(x); /* after the table handle: the export kept the memory alive */
  wrapped_memory();
  refused_misuse();
  printf("%s: %d failed checks\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
