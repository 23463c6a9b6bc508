/* A C program that owns its memory: it asks zerohop how big a track SoA of ROWS rows is and
 * where each column goes (zh_schema_layout, zh_schema_column_layout), allocates that much
 * itself, fills it, wraps it, and walks it in batches of BATCH rows (zh_table_batch_count,
 * zh_table_batch), the last one short, checking every batch's tensors are its rows of the
 * program's buffer. No DLPack header needed: zh_tensors_view describes each tensor.
 * Built and run by examples/cpp/run.sh (make cpp-example); exits 0 when every check passes.
 *   layout [ROWS [BATCH]]   (default 1000 rows in batches of 7) */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zerohop.h"

static int failures = 0;

static void check(int ok, const char *what) {
  if (!ok) {
    printf("FAIL %s (%s)\n", what, zh_last_error());
    ++failures;
  }
}

static int releases = 0;

static void give_back(void *buffer) {
  free(buffer);
  ++releases;
}

enum { PT, POSITION, COVARIANCE, ID, COLUMNS };

int main(int argc, char **argv) {
  const size_t rows = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000;
  const size_t batch_rows = argc > 2 ? strtoull(argv[2], NULL, 10) : 7;
  const size_t alignment = 128;
  zh_schema *schema = NULL;
  zh_column_info column[COLUMNS];
  size_t bytes = 0, count = 0, seen = 0, batches = 0;

  zh_schema_new(&schema);
  zh_schema_add_column(schema, "pt", "float32");
  zh_schema_add_vector(schema, "position", "float32", 3);
  zh_schema_add_matrix(schema, "covariance", "float32", 3, 3, ZH_COLUMN_MAJOR);
  zh_schema_add_column(schema, "id", "int64");
  check(zh_schema_add_column(schema, "pt", "float64") == ZH_INVALID_ARGUMENT &&
            zh_schema_len(schema) == COLUMNS,
        "a name used twice is refused when added, the schema unchanged");

  /* Sizing before any buffer exists: the bytes, and where each column goes. */
  check(zh_schema_layout(schema, rows, alignment, &bytes) == ZH_OK, "the layout's size");
  for (size_t i = 0; i < COLUMNS; ++i)
    check(zh_schema_column_layout(schema, rows, alignment, i, &column[i]) == ZH_OK,
          "a column's place");
  printf("%zu rows take %zu bytes at %zu-byte alignment; covariance at byte %zu, pitch %zu\n",
         rows, bytes, alignment, column[COVARIANCE].offset, column[COVARIANCE].pitch);

  /* The program's own allocation, filled by the offsets and pitches it was given:
   * pt = row, position[k] = 10 row + k, covariance component k = 100 row + k, id = row. */
  unsigned char *buffer = aligned_alloc(alignment, bytes);
  for (size_t r = 0; r < rows; ++r) {
    ((float *)(buffer + column[PT].offset))[r] = (float)r;
    for (size_t k = 0; k < 3; ++k)
      ((float *)(buffer + column[POSITION].offset))[k * column[POSITION].pitch + r] =
          (float)(10 * r + k);
    for (size_t k = 0; k < 9; ++k)
      ((float *)(buffer + column[COVARIANCE].offset))[k * column[COVARIANCE].pitch + r] =
          (float)(100 * r + k);
    ((int64_t *)(buffer + column[ID].offset))[r] = (int64_t)r;
  }

  zh_table *table = NULL;
  check(zh_table_wrap(schema, rows, alignment, buffer, bytes, -1, give_back, buffer, &table) ==
            ZH_OK,
        "the buffer the layout sized is wrapped");
  zh_schema_free(schema);
  zh_map *map = NULL;
  check(zh_map_new("pt; position; covariance; id", ZH_MAP_READONLY, &map) == ZH_OK, "map");

  check(zh_table_batch_count(table, batch_rows, &count) == ZH_OK, "batch count");
  for (size_t b = 0; b < count; ++b) {
    zh_table *batch = NULL;
    zh_tensors *tensors = NULL;
    zh_tensor_view pt, position, covariance, id;
    if (zh_table_batch(table, batch_rows, b, &batch) != ZH_OK ||
        zh_map_apply(map, batch, &tensors) != ZH_OK) {
      check(0, "a batch and its map");
      zh_table_free(batch);
      break;
    }
    zh_tensors_view(tensors, 0, &pt);
    zh_tensors_view(tensors, 1, &position);
    zh_tensors_view(tensors, 2, &covariance);
    zh_tensors_view(tensors, 3, &id);
    size_t n = (size_t)pt.shape[0], first = b * batch_rows;
    check(n == (b + 1 < count ? batch_rows : rows - first), "the batch's row count");
    check(first == seen, "batches follow each other");
    /* Views of the program's buffer at the batch's first row, not copies. */
    check((unsigned char *)pt.data == buffer + column[PT].offset + 4 * first, "pt in place");
    check((unsigned char *)position.data == buffer + column[POSITION].offset + 4 * first &&
              position.strides[1] == (int64_t)column[POSITION].pitch,
          "position in place, the table's pitch");
    check((unsigned char *)covariance.data == buffer + column[COVARIANCE].offset + 4 * first &&
              covariance.shape[1] == 3 && covariance.shape[2] == 3,
          "covariance in place");
    check((unsigned char *)id.data == buffer + column[ID].offset + 8 * first, "id in place");
    for (size_t r = 0; r < n; ++r) {
      const float *cov = covariance.data;
      check(((const float *)pt.data)[r] == (float)(first + r), "pt's values");
      check(((const float *)position.data)[2 * position.strides[1] + r] ==
                (float)(10 * (first + r) + 2),
            "position's values");
      /* Element (2, 1) of a column-major 3x3 is component 1 * 3 + 2. */
      check(cov[2 * covariance.strides[1] + 1 * covariance.strides[2] + r] ==
                (float)(100 * (first + r) + 5),
            "covariance's values");
      check(((const int64_t *)id.data)[r] == (int64_t)(first + r), "id's values");
    }
    seen += n;
    ++batches;
    zh_tensors_free(tensors);
    zh_table_free(batch);
  }
  check(seen == rows && batches == count, "every row once");
  zh_table *past = NULL;
  check(zh_table_batch(table, batch_rows, count, &past) == ZH_INVALID_ARGUMENT && past == NULL,
        "no batch past the last");
  check(zh_table_batch(table, SIZE_MAX, SIZE_MAX, &past) == ZH_INVALID_ARGUMENT && past == NULL,
        "no overflow at the edge of size_t");

  zh_map_free(map);
  zh_table_free(table);
  check(releases == 1, "the buffer is given back once, when the table goes");
  printf("%zu batches of %zu rows (the last %zu)\n", count, batch_rows,
         count ? rows - (count - 1) * batch_rows : 0);
  printf("%s: %d failed checks\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
