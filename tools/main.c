/* dtensor — the command-line tool: demo, info, bench. */
#include <stdio.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "tools.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: dtensor <command> [options]\n"
          "  demo [--world N] [--backend threads|mpi] [--json]\n"
          "                          the main job: a TP MLP exported, transformed, run on N ranks\n"
          "  info [--ops] [--json]   version, the op table and its sharding rules\n"
          "  bench kernels|dispatch|instructions|collectives|profile|tp [--json] [options]\n"
          "                          benchmarks against baselines measured in the same run\n"
          "  trace stats|plot FILE   utilization of a Chrome trace, or its timeline as SVG\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *command = argv[1];
  if (strcmp(command, "demo") == 0) return dt_tool_demo(argc - 1, argv + 1);
  if (strcmp(command, "info") == 0) return dt_tool_info(argc - 1, argv + 1);
  if (strcmp(command, "bench") == 0) return dt_tool_bench(argc - 1, argv + 1);
  if (strcmp(command, "trace") == 0) return dt_tool_trace(argc - 1, argv + 1);
  if (strcmp(command, "--help") == 0 || strcmp(command, "-h") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "dtensor: unknown command '%s'\n", command);
  usage(stderr);
  return 2;
}
