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

/* Runs fn over every row of the shape of ops[0] (the output), with the nops tensors as
 * operands (at most DT_LOOP_MAX_OPERANDS), each viewed through that shape with broadcast
 * strides: 0 where it has size 1 or lacks the dim. Does nothing for an empty shape. */
void dt__loop_tensors(int nops, const dt_tensor *const *ops, dt_inner_loop_fn fn, void *ctx);

/* dt__loop_tensors with the rows (or, for one row, runs of its elements, DT_PARALLEL_GRAIN at
 * least) split over the intra-op pool: fn must only write its own row's elements of ops[0]
 * (a copy, a pointwise map), never state shared through ctx; the calls come from several
 * threads in any order. */
void dt__loop_tensors_pooled(int nops, const dt_tensor *const *ops, dt_inner_loop_fn fn, void *ctx);

#endif /* DT_KERNELS_CPU_LOOP_H */
