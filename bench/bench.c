/* dtensor bench: dispatches to the benchmark suites. */
#include <stdio.h>
#include <string.h>

#include "tools.h"

int dt_tool_bench(int argc, char **argv) {
  if (argc < 2) {
    fprintf(
        stderr,
        "usage: dtensor bench <kernels|dispatch|instructions|collectives|profile|tp> [--json]\n");
    return 2;
  }
  if (strcmp(argv[1], "kernels") == 0) return dt_bench_kernels(argc - 1, argv + 1);
  if (strcmp(argv[1], "dispatch") == 0) return dt_bench_dispatch(argc - 1, argv + 1);
  if (strcmp(argv[1], "instructions") == 0) return dt_bench_instructions(argc - 1, argv + 1);
  if (strcmp(argv[1], "collectives") == 0) return dt_bench_collectives(argc - 1, argv + 1);
  if (strcmp(argv[1], "profile") == 0) return dt_bench_profile(argc - 1, argv + 1);
  if (strcmp(argv[1], "tp") == 0) return dt_bench_tp(argc - 1, argv + 1);
  fprintf(stderr, "dtensor bench: unknown suite '%s'\n", argv[1]);
  return 2;
}
