/*
 * The strided N-d loop every elementwise kernel runs on: it walks up to DT_LOOP_MAX_OPERANDS
 * operands of one iteration shape and calls an inner function once per innermost row, with
 * each operand's pointer and byte stride for that row. Dims that are contiguous in every
 * operand are merged first, so a contiguous tensor is one row.
 */
#ifndef DT_KERNELS_CPU_LOOP_H
#define DT_KERNELS_CPU_LOOP_H

#include "tensor/tensor_impl.h"

#define DT_LOOP_MAX_OPERANDS 4

/* ptrs[k] points at the row's first element of operand k; strides[k] is its byte stride. */
typedef void (*dt_inner_loop_fn)(char **ptrs, const int64_t *strides, int64_t n, void *ctx);

typedef struct dt_loop {
  int ndim;
  int nops;
  int64_t shape[DT_MAX_DIMS];
  char *base[DT_LOOP_MAX_OPERANDS];
  int64_t strides[DT_LOOP_MAX_OPERANDS][DT_MAX_DIMS]; /* bytes */
} dt_loop;

/* Starts a loop over `shape`. */
void dt__loop_init(dt_loop *loop, int ndim, const int64_t *shape);

/* Adds an operand: tensor t viewed through the loop's shape (broadcast strides: 0 where t
 * has size 1 or lacks the dim). Returns the operand's index. */
int dt__loop_add(dt_loop *loop, const dt_tensor *t);

/* Merges dims where possible and runs fn over every row. */
void dt__loop_run(dt_loop *loop, dt_inner_loop_fn fn, void *ctx);

#endif /* DT_KERNELS_CPU_LOOP_H */
