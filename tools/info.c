/* dtensor info: version and the op table. */
#include <stdio.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "tools.h"

bool dt_tool_has_flag(int argc, char **argv, const char *flag) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], flag) == 0) return true;
  }
  return false;
}

int dt_tool_info(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") != 0 && strcmp(argv[i], "--ops") != 0) {
      fprintf(stderr, "dtensor info: unknown option '%s' (usage: dtensor info [--ops] [--json])\n",
              argv[i]);
      return 2;
    }
  }
  bool json = dt_tool_has_flag(argc, argv, "--json");
  bool ops = dt_tool_has_flag(argc, argv, "--ops");
  if (!ops) {
    if (json) {
      printf("{\"version\":\"%s\",\"ops\":%d}\n", dt_version_string(), dt_op_count());
    } else {
      printf("libdtensor %s, %d ops\n", dt_version_string(), dt_op_count());
    }
    return 0;
  }
  for (int i = 0; i < dt_op_count(); i++) {
    if (json) {
      printf("{\"op\":\"%s\",\"sharding_rule\":%s}\n", dt_op_name(i),
             dt_op_has_sharding_rule(i) ? "true" : "false");
    } else {
      printf("%-100s sharding rule: %s\n", dt_op_schema(i),
             dt_op_has_sharding_rule(i) ? "yes" : "no");
    }
  }
  return 0;
}
