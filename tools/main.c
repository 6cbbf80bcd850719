/* dtensor — the command-line tool: demo, info, bench, trace. */
#include "tools.h"

static const tool_command commands[] = {
    {.name = "demo",
     .summary = "the main job: a TP MLP exported, transformed and run on N ranks",
     .usage = "[--world N] [--backend threads|mpi] [--json]",
     .details = "N ranks (default 4) on the threads backend, or mpirun's ranks with --backend "
                "mpi;\n--json ends with a one-line JSON summary.",
     .run = tool_demo},
    {.name = "info",
     .summary = "version, the op table and its sharding rules",
     .usage = "[--ops] [--json]",
     .run = tool_info},
    {.name = "bench",
     .summary = "benchmarks against baselines measured in the same run",
     .subcommands = tool_bench_suites,
     .noun = "suite"},
    {.name = "ckpt",
     .summary = "safetensors files and distributed checkpoints: inspect",
     .subcommands = tool_ckpt_commands,
     .noun = "command"},
    {.name = "trace",
     .summary = "utilization of a Chrome trace, or its timeline as SVG",
     .subcommands = tool_trace_commands,
     .noun = "command"},
    {0},
};

int main(int argc, char **argv) {
  return tool_dispatch("dtensor", commands, "command", argc, argv);
}
