/* dtensor bench: the table of benchmark suites (tools/command.c dispatches to them). */
#include "tools.h"

int bench_suite_train(int argc, char **argv);

const tool_command tool_bench_suites[] = {
    {.name = "kernels",
     .summary = "local GEMM, add and op dispatch against raw CBLAS and plain loops",
     .usage = "[--json] [--gemm-size N]",
     .run = bench_suite_kernels},
    {.name = "dispatch",
     .summary = "time to dispatch one distributed op (cache miss, hit, local op)",
     .usage = "[--world N] [--json]",
     .details = "Ranks are threads (default world 4).",
     .run = bench_suite_dispatch},
    {.name = "instructions",
     .summary = "instructions of one distributed op dispatch, counted under callgrind",
     .usage = "[--json] [--results FILE.csv]",
     .details = "Needs valgrind. --results appends CSV rows name,instruction_count,value.",
     .run = bench_suite_instructions},
    {.name = "collectives",
     .summary = "time and bandwidth of each collective over doubling sizes (nccl-tests style)",
     .usage = "[--backend threads|fake|mpi] [--world W] [--json] [--min-bytes N] "
              "[--max-bytes N]\n       [--ops all_reduce,all_gather,reduce_scatter,broadcast,"
              "all_to_all]",
     .details = "Sizes take K, M and G suffixes. With --backend mpi the world is mpirun's.",
     .run = bench_suite_collectives},
    {.name = "profile",
     .summary = "cost of recording profiler events and of analysing a trace",
     .usage = "[--json] [--keep] [--events N]",
     .details = "--events: the generated trace's events (default 1000000); --keep keeps it.",
     .run = bench_suite_profile},
    {.name = "tp",
     .summary = "a tensor-parallel MLP on 2 ranks against the same graph on 1 rank",
     .usage = "[--json] [--iters N] [--hidden H] [--batch B]",
     .run = bench_suite_tp},
    {.name = "ckpt",
     .summary = "state-dict save and load bandwidth on 1 and 4 ranks vs raw write/read",
     .usage = "[--json] [--size BYTES] [--1g] [--dir DIR] [--reps N]",
     .details = "--size takes K, M and G suffixes (default 256M; --1g: 1 GiB). DIR (default\n"
                "/tmp) holds the files, removed afterwards; best of N alternating runs (default 3).",
     .run = bench_suite_ckpt},
    {.name = "train",
     .summary = "optimizer step (SGD momentum, AdamW) over 1,000 x 1,000 floats vs a plain C loop",
     .usage = "[--json] [--iters N] [--params P] [--elems E]",
     .run = bench_suite_train},
    {0},
};
