/* dtensor info: version and the op table. */
#include <stdio.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "tools.h"

int tool_info(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") != 0 && strcmp(argv[i], "--ops") != 0) {
      fprintf(stderr, "dtensor info: unknown option '%s' (see 'dtensor info --help')\n", argv[i]);
      return 2;
    }
  }
  bool json = tool_has_flag(argc, argv, "--json");
  bool ops = tool_has_flag(argc, argv, "--ops");
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
