/* dtensor info: version and the op table (--json: one JSON document either way). */
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
  /* --json: one JSON document (an object holding the list), one op per line inside it. */
  if (json) printf("{\"version\":\"%s\",\"ops\":[\n", dt_version_string());
  for (int i = 0; i < dt_op_count(); i++) {
    if (json) {
      printf("{\"op\":\"%s\",\"sharding_rule\":%s}%s\n", dt_op_name(i),
             dt_op_has_sharding_rule(i) ? "true" : "false", i + 1 < dt_op_count() ? "," : "");
    } else {
      printf("%-100s sharding rule: %s\n", dt_op_schema(i),
             dt_op_has_sharding_rule(i) ? "yes" : "no");
    }
  }
  if (json) printf("]}\n");
  return 0;
}
