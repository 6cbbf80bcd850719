/* The op table, generated from ops/op_list.h, and the public queries on it. Includes the op
 * definitions only (ops/op_def.h): the inline helpers of ops/op_impl.h read this table, so
 * this file sits below them. */
#include "ops/op_def.h"

const dt_op_def dt__op_table[DT_OP_COUNT] = {
#define DT_OP_DEF(id, op_name, op_kind, required, infer_fn, kernel_fn, rule_family, shape_family,  \
                  op_func, op_traits, op_backward, op_schema)                                      \
  [DT_OP_##id] = {.name = op_name,                                                                 \
                  .schema = op_schema,                                                             \
                  .kind = DT_OP_KIND_##op_kind,                                                    \
                  .n_required = required,                                                          \
                  .infer = infer_fn,                                                               \
                  .rule = DT_RULE_##rule_family,                                                   \
                  .shape = DT_SHAPE_##shape_family,                                                \
                  .func = op_func,                                                                 \
                  .traits = op_traits,                                                             \
                  .backward = DT_BACKWARD_FN_##op_backward},
    DT_OP_LIST(DT_OP_DEF)
#undef DT_OP_DEF
};

int dt_op_count(void) { return DT_OP_COUNT; }

const char *dt_op_name(int op) {
  return op >= 0 && op < DT_OP_COUNT ? dt__op_table[op].name : NULL;
}

const char *dt_op_schema(int op) {
  return op >= 0 && op < DT_OP_COUNT ? dt__op_table[op].schema : NULL;
}
