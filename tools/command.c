/* Walking the command tables: lookup, --help and usage for every command alike. */
#include <stdio.h>
#include <string.h>

#include "core/text_escape.h"
#include "dtensor/dtensor.h"
#include "tools.h"

void tool_print_error(const char *context) {
  fprintf(stderr, "%s: ", context);
  dt__escape_write_message(stderr, dt_last_error());
  fputc('\n', stderr);
}

static void log_to_stderr(dt_log_level level, const char *message, void *user) {
  (void)user;
  static const char *const names[] = {"debug", "info", "warning", "error"};
  int i = (int)level - (int)DT_LOG_DEBUG;
  fprintf(stderr, "dtensor: %s: ", i >= 0 && i < 4 ? names[i] : "log");
  dt__escape_write_message(stderr, message);
  fputc('\n', stderr);
}

void tool_log_to_stderr(void) { dt_set_log_callback(log_to_stderr, NULL, DT_LOG_WARN); }

bool tool_has_flag(int argc, char **argv, const char *flag) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], flag) == 0) return true;
  }
  return false;
}

static bool is_help(const char *arg) {
  return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

static void group_usage(FILE *f, const char *path, const tool_command *table, const char *noun) {
  fprintf(f, "usage: %s <%s> [options]\n\n%ss:\n", path, noun, noun);
  for (const tool_command *c = table; c->name; c++) fprintf(f, "  %-14s %s\n", c->name, c->summary);
  fprintf(f, "\nRun '%s <%s> --help' for its options.\n", path, noun);
}

static void command_usage(FILE *f, const char *path, const tool_command *c) {
  fprintf(f, "usage: %s %s %s\n%s\n", path, c->name, c->usage, c->summary);
  if (c->details) fprintf(f, "%s\n", c->details);
}

int tool_dispatch(const char *path, const tool_command *table, const char *noun, int argc,
                  char **argv) {
  if (argc < 2) {
    group_usage(stderr, path, table, noun);
    return 2;
  }
  if (is_help(argv[1])) {
    group_usage(stdout, path, table, noun);
    return 0;
  }
  const tool_command *c = table;
  while (c->name && strcmp(c->name, argv[1]) != 0) c++;
  if (!c->name) {
    fprintf(stderr, "%s: unknown %s '%s'\n", path, noun, argv[1]);
    group_usage(stderr, path, table, noun);
    return 2;
  }
  if (c->subcommands) {
    char sub_path[256];
    int n = snprintf(sub_path, sizeof sub_path, "%s %s", path, c->name);
    if (n < 0 || (size_t)n >= sizeof sub_path) {
      fprintf(stderr, "%s: command path too long\n", path);
      return 2;
    }
    return tool_dispatch(sub_path, c->subcommands, c->noun, argc - 1, argv + 1);
  }
  /* --help anywhere among a command's arguments asks for its usage, so that no command runs
   * (a benchmark for minutes) when the user only wanted to read its options. */
  for (int i = 2; i < argc; i++) {
    if (is_help(argv[i])) {
      command_usage(stdout, path, c);
      return 0;
    }
  }
  return c->run(argc - 1, argv + 1);
}
