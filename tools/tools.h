/* The dtensor tool's commands, as tables. Each command is a row {name, summary, usage, run};
 * a command with subcommands (bench, trace) points at its own table instead of a function.
 * tool_dispatch walks the tables, so every command and suite answers --help the same way.
 *
 * Tool code is not the library: its names use tool_ and bench_, never the library's dt_. */
#ifndef TOOLS_H
#define TOOLS_H

#include <stdbool.h>

typedef int (*tool_run_fn)(int argc, char **argv);

typedef struct tool_command {
  const char *name;
  const char *summary;                    /* one line, for the list of its table */
  const char *usage;                      /* the arguments after the command's name */
  const char *details;                    /* more text for --help, or NULL */
  tool_run_fn run;                        /* argv[0] is the command's name; NULL for a group */
  const struct tool_command *subcommands; /* a group's table, ended by a row with NULL name */
  const char *noun;                       /* what a group's rows are called: "suite", "command" */
} tool_command;

/* Runs the row of `table` named argv[1]. `path` is the command line so far ("dtensor",
 * "dtensor bench"), for usage and messages. --help or -h prints usage on stdout and returns
 * 0; no or an unknown name prints usage on stderr and returns 2. */
int tool_dispatch(const char *path, const tool_command *table, const char *noun, int argc,
                  char **argv);

/* The tables of the command groups. */
extern const tool_command tool_bench_suites[];
extern const tool_command tool_trace_commands[];
extern const tool_command tool_ckpt_commands[];

/* The commands and suites. */
int tool_demo(int argc, char **argv);
int tool_demo_train(int argc, char **argv);
int tool_info(int argc, char **argv);
int tool_generate(int argc, char **argv);
int tool_finetune(int argc, char **argv);
int tool_plan(int argc, char **argv);
extern const char tool_plan_details[]; /* its --help text */
int tool_trace_stats(int argc, char **argv);
int tool_trace_plot(int argc, char **argv);
int bench_suite_kernels(int argc, char **argv);
int bench_suite_dispatch(int argc, char **argv);
int bench_suite_instructions(int argc, char **argv);
int bench_suite_collectives(int argc, char **argv);
int bench_suite_profile(int argc, char **argv);
int bench_suite_tp(int argc, char **argv);
int bench_suite_autograd(int argc, char **argv);
int bench_suite_ckpt(int argc, char **argv);
int bench_suite_compile(int argc, char **argv);
int bench_suite_train(int argc, char **argv);
int bench_suite_ops(int argc, char **argv);
int bench_gpt_train(int argc, char **argv); /* bench train --size ... */
int bench_suite_pipeline(int argc, char **argv);
int bench_suite_context(int argc, char **argv);
int bench_suite_models(int argc, char **argv);
int bench_suite_cuda(int argc, char **argv);

/* Prints "context: " and the library's last error message, escaped (it may quote strings from
 * files: a config value, a file name), and a newline on stderr. */
void tool_print_error(const char *context);

/* Installs the library's log callback: warnings and errors (a DT_* variable with a bad value,
 * ignored) go to stderr as "dtensor: warning: ...", escaped. Called once by main. */
void tool_log_to_stderr(void);

/* True if flag appears among argv[1..argc). */
bool tool_has_flag(int argc, char **argv, const char *flag);

#endif
