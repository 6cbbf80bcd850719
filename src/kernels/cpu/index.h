/* CPU kernels of the index and ordering ops: tril/triu, cumsum, topk, index_select, gather,
 * scatter_add. They read any strides and write a contiguous output the op layer allocated. */
#ifndef DT_KERNELS_CPU_INDEX_H
#define DT_KERNELS_CPU_INDEX_H

#include "tensor/tensor_impl.h"

/* out = a with the elements off the kept triangle of its last two dims zeroed: tril keeps
 * column - row <= diagonal, triu (upper) column - row >= diagonal. Element bytes are copied,
 * so every dtype is exact. */
void dt__cpu_triangle(const dt_tensor *a, int64_t diagonal, bool upper, dt_tensor *out);

/* out = the running sum of a along dim: floating dtypes accumulate in double (PyTorch's CPU
 * accumulation type), integers and bool in int64; out's dtype is a's floating dtype or int64. */
void dt__cpu_cumsum(const dt_tensor *a, int dim, dt_tensor *out);

/* The k largest (smallest when !largest) elements of every row of a along dim, sorted (ties:
 * the lower index first; NaN counts as larger than every number, as in PyTorch), into values
 * (a's dtype) and indices (int64), both a's shape with k along dim. DT_ERR_NOMEM naming op. */
dt_status dt__cpu_topk(const char *op, const dt_tensor *a, int64_t k, int dim, bool largest,
                       dt_tensor *values, dt_tensor *indices);

/* out = a's slices along dim picked by the 1-D index (int64/int32): out[.., i, ..] =
 * a[.., index[i], ..]. Every index is checked against a's size along dim before out is
 * written (DT_ERR_INDEX naming op, the position and the value). */
dt_status dt__cpu_index_select(const char *op, const dt_tensor *a, int dim, const dt_tensor *index,
                               dt_tensor *out);

/* PyTorch's gather: out (index's shape) at position p is a at p with p[dim] = index[p]. Every
 * index is checked against `limit` first, as for index_select. a may be a row window (a shard
 * of rows along dim, distributed dispatch): it holds rows [offset, offset + its size) of
 * `limit`, and an index outside them gives a zero (the shards' outputs sum to the gather). A
 * whole a is the window at offset 0 with limit = its size. */
dt_status dt__cpu_gather(const char *op, const dt_tensor *a, int dim, const dt_tensor *index,
                         int64_t offset, int64_t limit, dt_tensor *out);

/* out = self, then out[..., index[i], ...] += src[i] along dim for every position i of index
 * (PyTorch's scatter_add). Every index is checked against `limit` (self's size along dim for a
 * whole self) before out is written: a bad one fails naming op, the position and the value.
 * self may be a row window of a larger tensor (a shard of rows along dim, distributed
 * dispatch): self holds rows [offset, offset + self's size) of `limit`; an index outside that
 * window contributes nothing, one inside it adds into row index - offset. A whole self is the
 * window at offset 0 with limit = its size. */
dt_status dt__cpu_scatter_add(const char *op, const dt_tensor *self, int dim,
                              const dt_tensor *index, const dt_tensor *src, int64_t offset,
                              int64_t limit, dt_tensor *out);

#endif /* DT_KERNELS_CPU_INDEX_H */
