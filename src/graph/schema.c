/*
 * What a call node may hold, read from the op's ATen schema in the op list (ops/op_list.h),
 * so that the text format's arity checks and defaults have one source: the schema. Tensor
 * and Tensor? parameters are the positional tensor arguments; Scalar and float parameters
 * fill dt_op_call's scalars[] in the order the schema lists them.
 */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_impl.h"

/* The type of a parameter without its alias annotation: "Tensor(a!)" -> "Tensor",
 * "Tensor(a -> *)" -> "Tensor", "int[1]?" stays. */
static void base_type(const char *begin, const char *end, char *out, size_t size) {
  size_t n = 0;
  int depth = 0;
  for (const char *c = begin; c < end && n + 1 < size; c++) {
    if (*c == '(') depth++;
    if (depth == 0) out[n++] = *c;
    if (*c == ')') depth--;
  }
  out[n] = '\0';
}

/* Reads one parameter "type name[=default]" of [begin, end). */
static void read_parameter(const char *begin, const char *end, dt_op_signature *sig) {
  while (begin < end && *begin == ' ') begin++;
  if (end - begin == 1 && *begin == '*') return; /* keyword-only marker */
  /* The type ends at the first space outside its alias parentheses. */
  const char *type_end = begin;
  int depth = 0;
  while (type_end < end && (depth > 0 || *type_end != ' ')) {
    if (*type_end == '(') depth++;
    if (*type_end == ')') depth--;
    type_end++;
  }
  char type[32];
  base_type(begin, type_end, type, sizeof type);
  if (strcmp(type, "Tensor") == 0 || strcmp(type, "Tensor?") == 0) {
    sig->max_inputs++;
    return;
  }
  if (strcmp(type, "Scalar") != 0 && strcmp(type, "Scalar?") != 0 && strcmp(type, "float") != 0 &&
      strcmp(type, "float?") != 0) {
    return;
  }
  if (sig->n_scalars >= 2) {
    sig->n_scalars++; /* more than dt_op_call holds: the caller's consistency check sees it */
    return;
  }
  int k = sig->n_scalars++;
  const char *name = type_end;
  while (name < end && *name == ' ') name++;
  const char *eq = memchr(name, '=', (size_t)(end - name));
  const char *name_end = eq ? eq : end;
  size_t len = (size_t)(name_end - name);
  if (len >= sizeof sig->scalar_name[k]) len = sizeof sig->scalar_name[k] - 1;
  memcpy(sig->scalar_name[k], name, len);
  sig->scalar_name[k][len] = '\0';
  sig->scalar_has_default[k] = eq != NULL;
  sig->scalar_default[k] = eq ? strtod(eq + 1, NULL) : 0;
}

void dt__op_signature(int op, dt_op_signature *sig) {
  memset(sig, 0, sizeof *sig);
  const char *s = strchr(dt__op_table[op].schema, '(');
  if (!s) return;
  s++;
  /* Parameters are separated by commas outside parentheses and brackets; the list ends at
   * the parenthesis that closes the one after the op's name. */
  const char *begin = s;
  int depth = 0;
  for (const char *c = s; *c; c++) {
    if (*c == '(' || *c == '[') depth++;
    if ((*c == ')' || *c == ']') && depth > 0) {
      depth--;
      continue;
    }
    if (depth == 0 && (*c == ',' || *c == ')')) {
      if (c > begin) read_parameter(begin, c, sig);
      if (*c == ')') return;
      begin = c + 1;
    }
  }
}
