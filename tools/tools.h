/* Subcommands of the dtensor tool. Each takes argv starting at its own name and returns the
 * process exit code. */
#ifndef DT_TOOLS_H
#define DT_TOOLS_H

#include <stdbool.h>

int dt_tool_demo(int argc, char **argv);
int dt_tool_info(int argc, char **argv);
int dt_tool_bench(int argc, char **argv);
int dt_bench_kernels(int argc, char **argv);
int dt_bench_dispatch(int argc, char **argv);
int dt_bench_instructions(int argc, char **argv);
int dt_bench_collectives(int argc, char **argv);
int dt_tool_trace(int argc, char **argv);
int dt_bench_profile(int argc, char **argv);
int dt_bench_tp(int argc, char **argv);

/* True if flag appears among argv[1..argc). */
bool dt_tool_has_flag(int argc, char **argv, const char *flag);

#endif
