/* The strided N-d loop shared by elementwise kernels. */
#include "kernels/cpu/loop.h"

typedef struct dt_loop {
  int ndim;
  int nops;
  int64_t shape[DT_MAX_DIMS];
  char *base[DT_LOOP_MAX_OPERANDS];
  int64_t strides[DT_LOOP_MAX_OPERANDS][DT_MAX_DIMS]; /* bytes */
} dt_loop;

static void loop_init(dt_loop *loop, int ndim, const int64_t *shape) {
  loop->ndim = ndim;
  loop->nops = 0;
  for (int i = 0; i < ndim; i++) loop->shape[i] = shape[i];
}

/* Adds tensor t as the next operand, viewed through the loop's shape. */
static void loop_add(dt_loop *loop, const dt_tensor *t) {
  int k = loop->nops++;
  DT_ASSERT(k < DT_LOOP_MAX_OPERANDS);
  int64_t esize = (int64_t)dt__dtype_sizes[t->dtype];
  int lead = loop->ndim - t->ndim;
  DT_ASSERT(lead >= 0);
  loop->base[k] = dt__tensor_base(t);
  for (int i = 0; i < loop->ndim; i++) {
    int it = i - lead;
    bool broadcast = it < 0 || (t->shape[it] == 1 && loop->shape[i] != 1);
    loop->strides[k][i] = broadcast ? 0 : t->strides[it] * esize;
  }
}

/* Drops size-1 dims and merges dim i into i+1 when every operand steps through them as one
 * contiguous run (stride[i] == stride[i+1] * shape[i+1]). */
static void coalesce(dt_loop *loop) {
  int n = 0;
  for (int i = 0; i < loop->ndim; i++) {
    if (loop->shape[i] == 1) continue;
    loop->shape[n] = loop->shape[i];
    for (int k = 0; k < loop->nops; k++) loop->strides[k][n] = loop->strides[k][i];
    n++;
  }
  loop->ndim = n;
  if (n <= 1) return;
  int out = 0;
  for (int i = 1; i < n; i++) {
    bool mergeable = true;
    for (int k = 0; k < loop->nops; k++) {
      if (loop->strides[k][out] != loop->strides[k][i] * loop->shape[i]) {
        mergeable = false;
        break;
      }
    }
    if (mergeable) {
      loop->shape[out] *= loop->shape[i];
      for (int k = 0; k < loop->nops; k++) loop->strides[k][out] = loop->strides[k][i];
    } else {
      out++;
      loop->shape[out] = loop->shape[i];
      for (int k = 0; k < loop->nops; k++) loop->strides[k][out] = loop->strides[k][i];
    }
  }
  loop->ndim = out + 1;
}

/* False for an empty shape; otherwise coalesces, and makes a 0-d loop one row of one
 * element (strides 0). */
static bool loop_prepare(dt_loop *loop) {
  for (int i = 0; i < loop->ndim; i++) {
    if (loop->shape[i] == 0) return false;
  }
  coalesce(loop);
  if (loop->ndim == 0) {
    loop->ndim = 1;
    loop->shape[0] = 1;
    for (int k = 0; k < loop->nops; k++) loop->strides[k][0] = 0;
  }
  return true;
}

/* The loop over ops[0]'s shape with the nops operands, prepared; false when it is empty. */
static bool loop_build(dt_loop *loop, int nops, const dt_tensor *const *ops) {
  loop_init(loop, ops[0]->ndim, ops[0]->shape);
  for (int k = 0; k < nops; k++) loop_add(loop, ops[k]);
  return loop_prepare(loop);
}

static int64_t loop_rows(const dt_loop *loop) {
  int64_t rows = 1;
  for (int d = 0; d < loop->ndim - 1; d++) rows *= loop->shape[d];
  return rows;
}

/* Runs fn over rows [begin, end) of the prepared loop (row-major over its outer dims), over
 * the elements [from, to) of each row. */
static void loop_range(const dt_loop *loop, int64_t begin, int64_t end, int64_t from, int64_t to,
                       dt_inner_loop_fn fn, void *ctx) {
  int last = loop->ndim - 1;
  char *ptrs[DT_LOOP_MAX_OPERANDS];
  int64_t inner[DT_LOOP_MAX_OPERANDS] = {0};
  for (int k = 0; k < loop->nops; k++) inner[k] = loop->strides[k][last];
  int64_t index[DT_MAX_DIMS] = {0};
  for (int64_t d = last - 1, at = begin; d >= 0; d--) {
    index[d] = at % loop->shape[d];
    at /= loop->shape[d];
  }
  for (int64_t row = begin; row < end; row++) {
    for (int k = 0; k < loop->nops; k++) {
      char *p = loop->base[k] + from * inner[k];
      for (int d = 0; d < last; d++) p += index[d] * loop->strides[k][d];
      ptrs[k] = p;
    }
    fn(ptrs, inner, to - from, ctx);
    for (int d = last - 1; d >= 0; d--) {
      if (++index[d] < loop->shape[d]) break;
      index[d] = 0;
    }
  }
}

void dt__loop_tensors(int nops, const dt_tensor *const *ops, dt_inner_loop_fn fn, void *ctx) {
  dt_loop loop;
  if (!loop_build(&loop, nops, ops)) return;
  loop_range(&loop, 0, loop_rows(&loop), 0, loop.shape[loop.ndim - 1], fn, ctx);
}

typedef struct pooled_loop {
  const dt_loop *loop;
  dt_inner_loop_fn fn;
  void *ctx;
  int64_t row_len;
  bool split_row; /* one row, split into runs of its elements */
} pooled_loop;

static void pooled_chunk(void *arg, int64_t begin, int64_t end) {
  const pooled_loop *p = arg;
  if (p->split_row) {
    loop_range(p->loop, 0, 1, begin, end, p->fn, p->ctx);
  } else {
    loop_range(p->loop, begin, end, 0, p->row_len, p->fn, p->ctx);
  }
}

void dt__loop_tensors_pooled(int nops, const dt_tensor *const *ops, dt_inner_loop_fn fn,
                             void *ctx) {
  dt_loop loop;
  if (!loop_build(&loop, nops, ops)) return;
  int64_t rows = loop_rows(&loop), n = loop.shape[loop.ndim - 1];
  pooled_loop p = {.loop = &loop, .fn = fn, .ctx = ctx, .row_len = n, .split_row = rows == 1};
  if (p.split_row) {
    dt__parallel_for(n, DT_PARALLEL_GRAIN, pooled_chunk, &p);
  } else {
    dt__parallel_for(rows, n >= DT_PARALLEL_GRAIN ? 1 : DT_PARALLEL_GRAIN / n, pooled_chunk, &p);
  }
}
