/* dtensor — the command-line tool: demo, info, bench. */
#include <stdio.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "tools.h"

static void usage(FILE *f) {
  fprintf(f, "usage: dtensor <command> [options]\n"
             "  demo [--world N] [--json]  TP MLP: export, transform, run on N ranks\n"
             "  info [--ops] [--json]  version and the op table\n"
             "  bench kernels [--json] local kernel benchmarks\n"
             "  trace stats|plot FILE  utilization of a Chrome trace, or its timeline as SVG\n"

             "  bench tp [--json]      tensor-parallel MLP forward, 2 ranks vs 1\n");
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
