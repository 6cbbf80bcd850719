/* dtensor bench: dispatches to the benchmark suites. */
#include <stdio.h>
#include <string.h>

#include "tools.h"

int dt_tool_bench(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: dtensor bench <suite> [--json]\n");
    return 2;
  }
  fprintf(stderr, "dtensor bench: unknown suite '%s'\n", argv[1]);
  return 2;
}
