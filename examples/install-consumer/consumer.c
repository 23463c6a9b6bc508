/* A C program outside zerohop's tree, built from an installed prefix alone (pkg-config or
 * find_package; shared or static) and run without LD_LIBRARY_PATH: wraps a buffer of its own,
 * reads back where a column lies, and prints the library's version for run.sh to compare with
 * the installed package's. Exits 0 when it all works. */
#include <stdio.h>
#include <stdlib.h>

#include "zerohop.h"

static int released = 0;

static void give_back(void *buffer) {
  free(buffer);
  ++released;
}

int main(void) {
  zh_schema *schema = NULL;
  zh_table *table = NULL;
  zh_column_info info;
  void *buffer = aligned_alloc(128, 2 * 128);
  if (buffer == NULL) return 1;
  zh_schema_new(&schema);
  zh_schema_add_column(schema, "pt", "float32");
  zh_schema_add_column(schema, "eta", "float32");
  if (zh_table_wrap(schema, 10, 128, buffer, 2 * 128, -1, give_back, buffer, &table) != ZH_OK ||
      zh_table_column_info(table, "eta", &info) != ZH_OK || info.offset != 128) {
    fprintf(stderr, "consumer: %s\n", zh_last_error());
    return 1;
  }
  zh_table_free(table);
  zh_schema_free(schema);
  if (released != 1) {
    fprintf(stderr, "consumer: the buffer was given back %d times, not once\n", released);
    return 1;
  }
  printf("zerohop %s: eta at byte %zu\n", zh_version(), (size_t)info.offset);
  return 0;
}
