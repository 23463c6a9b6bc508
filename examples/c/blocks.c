/* Several layouts in one buffer (CMS's SoABlocks) from plain C11: this program asks zerohop
 * where a block of tracks and a block of vertices go, allocates one buffer for both, fills it
 * by the SoA rules, wraps it as two tables and maps each; the buffer is given back once, after
 * the last table. Built and run by examples/cpp/run.sh, and under valgrind by
 * scripts/valgrind-capi.sh; exits 0 when every check passes. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

enum { TRACKS = 1000, VERTICES = 40, ALIGNMENT = 128 };

/* The SoA rules: each column (each component of a vector) padded to the alignment. */
static size_t padded(size_t bytes) { return (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT; }

/* Element `i` of the tensor a map made, which must be a view of `expected` with `rows` rows. */
static const void *viewed(zh_tensors *tensors, size_t index, const unsigned char *expected,
                          long rows) {
  zh_tensor_view view;
  if (zh_tensors_view(tensors, index, &view) != ZH_OK) return NULL;
  if ((const unsigned char *)view.data != expected || view.shape[0] != rows) return NULL;
  return view.data;
}

int main(void) {
  zh_schema *tracks = NULL, *vertices = NULL;
  zh_tensors *kin = NULL, *vtx = NULL;
  size_t offsets[2] = {0, 0}, total = 0;
  const size_t rows[2] = {TRACKS, VERTICES};

  zh_schema_new(&tracks);
  zh_schema_add_column(tracks, "pt", "float32");
  zh_schema_add_column(tracks, "eta", "float32");
  zh_schema_add_vector(tracks, "position", "float32", 3);
  zh_schema_new(&vertices);
  zh_schema_add_column(vertices, "z", "float64");
  zh_schema_add_column(vertices, "chi2", "float32");
  const zh_schema *schemas[2] = {tracks, vertices};

  check(zh_blocks_layout(schemas, rows, 2, ALIGNMENT, offsets, &total) == ZH_OK,
        "the layout of tracks and vertices in one buffer");
  const size_t track_column = padded(TRACKS * sizeof(float));
  const size_t vertex_bytes = padded(VERTICES * sizeof(double)) + padded(VERTICES * 4);
  check(offsets[0] == 0 && offsets[1] == 5 * track_column &&
            total == offsets[1] + vertex_bytes,
        "the vertices start where the tracks' five padded columns end");

  unsigned char *buffer = aligned_alloc(ALIGNMENT, padded(total));
  float *pt = (float *)buffer, *eta = (float *)(buffer + track_column);
  double *z = (double *)(buffer + offsets[1]);
  for (int i = 0; i < TRACKS; ++i) {
    pt[i] = (float)i;
    eta[i] = -(float)i;
  }
  for (int j = 0; j < VERTICES; ++j) z[j] = 0.5 * j;

  zh_table *tables[2] = {NULL, NULL};
  check(zh_blocks_wrap(schemas, rows, 2, ALIGNMENT, buffer, total, -1, give_back, buffer,
                       tables) == ZH_OK,
        "one table per block over this program's buffer");
  check(zh_table_map(tables[0], "kin: pt, eta; position", 0, &kin) == ZH_OK &&
            zh_tensors_len(kin) == 2,
        "the tracks block maps as any table");
  const float *k = viewed(kin, 0, buffer, TRACKS);
  /* kin is (n, 2) over pt and eta: element (i, 1) is one padded column further. */
  check(k != NULL && k[7] == 7.0f && k[7 + track_column / sizeof(float)] == -7.0f,
        "kin is a view of the tracks' pt and eta, no copy");
  check(viewed(kin, 1, buffer + 2 * track_column, TRACKS) != NULL,
        "position is a view of the tracks' three components");
  check(zh_table_map(tables[1], "z", ZH_MAP_READONLY, &vtx) == ZH_OK,
        "the vertices block maps as any table");
  const double *zv = viewed(vtx, 0, buffer + offsets[1], VERTICES);
  check(zv != NULL && zv[39] == 19.5, "z is a view of the vertices block, no copy");

  zh_tensors_free(kin);
  zh_tensors_free(vtx);
  zh_table_free(tables[1]);
  check(releases == 0, "the buffer is not given back while the tracks' table lives");
  zh_table_free(tables[0]);
  check(releases == 1, "the buffer is given back once, after the last block's table");

  /* A buffer a byte too small for the vertices: refused, naming the block, given back. */
  buffer = aligned_alloc(ALIGNMENT, padded(total));
  tables[0] = tables[1] = NULL;
  check(zh_blocks_wrap(schemas, rows, 2, ALIGNMENT, buffer, total - 1, -1, give_back, buffer,
                       tables) == ZH_INVALID_ARGUMENT &&
            tables[0] == NULL && tables[1] == NULL && releases == 2,
        "a buffer too small is refused and given back at once");
  check(strstr(zh_last_error(), "block 1") != NULL, zh_last_error());

  zh_schema_free(tracks);
  zh_schema_free(vertices);
  printf("%s: %d failed checks\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
