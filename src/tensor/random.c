/*
 * Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as
 * easy as 1, 2, 3", SC 2011). Element i of a random stream is a pure function of
 * (seed, i), so any shard of a distributed random tensor is generated independently and
 * equals the same slice of the whole tensor.
 *
 * Mapping: the 128-bit counter is (i, 0) for element i and the key is the 64-bit seed; the
 * four 32-bit outputs give element i its uniforms (two 32-bit words form one double
 * uniform; normals use Box-Muller on two uniforms from the same block).
 */
#include <inttypes.h>
#include <math.h>

#include "tensor/philox.h"
#include "tensor/tensor_impl.h"

typedef dt_philox_block philox_block;

static inline philox_block block_for(uint64_t seed, uint64_t index) {
  return dt__philox_block(seed, index);
}

/* An integer range [a, b) must be non-empty, integral, exactly representable (|a|, |b| <=
 * 2^53: values travel as doubles) and within the dtype, or values would wrap. */
static dt_status check_integer_range(const char *op, double a, double b, dt_dtype dtype) {
  const double exact = 9007199254740992.0; /* 2^53 */
  if (!(b > a) || a != floor(a) || b != floor(b) || a < -exact || b > exact) {
    return dt__error(DT_ERR_INVALID,
                     "%s: integer range [%g, %g) must be non-empty, integral and within +-2^53", op,
                     a, b);
  }
  double lo = -exact, hi = exact;
  switch (dtype) {
  case DT_I32: lo = -2147483648.0, hi = 2147483648.0; break;
  case DT_U8: lo = 0, hi = 256; break;
  case DT_BOOL: lo = 0, hi = 2; break;
  default: break; /* int64 and the floating dtypes hold every integer up to 2^53 */
  }
  if (dtype == DT_BF16 || dtype == DT_F16 || dtype == DT_F32) hi = exact; /* rounded, not wrapped */
  if (a < lo || b > hi) {
    return dt__error(DT_ERR_INVALID, "%s: integer range [%g, %g) does not fit %s", op, a, b,
                     dt_dtype_name(dtype));
  }
  return DT_OK;
}

static inline uint32_t bits24(const philox_block *r, unsigned s) { return dt__philox_bits24(r, s); }

/* The value of element `index` of the stream. */
static double random_value(dt_random_kind kind, double a, double b, uint64_t seed, uint64_t index) {
  if (kind == DT_RANDOM_UNIFORM) return dt__philox_uniform_f64_at(seed, index, a, b);
  philox_block r = block_for(seed, index);
  switch (kind) {
  case DT_RANDOM_UNIFORM: break;
  case DT_RANDOM_NORMAL: {
    double u1 = 1.0 - dt__philox_unit_f64(r.v[0], r.v[1]); /* (0, 1]: log is finite */
    double u2 = dt__philox_unit_f64(r.v[2], r.v[3]);
    return a + b * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
  }
  case DT_RANDOM_INTEGER: {
    uint64_t range = (uint64_t)((int64_t)b - (int64_t)a);
    uint64_t bits = ((uint64_t)r.v[0] << 32) | r.v[1];
    return (double)((int64_t)a + (int64_t)(bits % range));
  }
  }
  return 0.0;
}

dt_status dt_random_fill(dt_tensor *t, dt_random_kind kind, double a, double b, uint64_t seed,
                         uint64_t first_index) {
  if (!t) return dt__error(DT_ERR_INVALID, "dt_random_fill: tensor is NULL");
  if (!dt__is_contiguous(t->ndim, t->shape, t->strides)) {
    return dt__error(DT_ERR_INVALID, "dt_random_fill: tensor must be contiguous");
  }
  if (kind == DT_RANDOM_INTEGER) {
    dt_status st = check_integer_range("random_fill", a, b, t->dtype);
    if (st) return st;
  } else if (kind == DT_RANDOM_UNIFORM && !(b >= a)) {
    return dt__error(DT_ERR_INVALID, "dt_random_fill: uniform range [%g, %g) is empty", a, b);
  } else if (kind != DT_RANDOM_UNIFORM && kind != DT_RANDOM_NORMAL) {
    return dt__error(DT_ERR_INVALID, "dt_random_fill: unknown kind %d", (int)kind);
  }
  if (kind != DT_RANDOM_INTEGER && !dt_dtype_is_floating(t->dtype)) {
    return dt__error(DT_ERR_DTYPE,
                     "dt_random_fill: uniform and normal need a floating dtype, got %s",
                     dt_dtype_name(t->dtype));
  }
  dt__random_fill_checked(t, kind, a, b, seed, first_index);
  return DT_OK;
}

void dt__random_fill_checked(dt_tensor *t, dt_random_kind kind, double a, double b, uint64_t seed,
                             uint64_t first_index) {
  int64_t n = dt__tensor_numel(t);
  char *p = dt__tensor_base(t);
  size_t esize = dt__dtype_sizes[t->dtype];
  if (t->dtype == DT_F32 && kind == DT_RANDOM_UNIFORM) {
    /* float32 uniforms take 24 bits each, five per 128-bit Philox block: element i is slot
     * i % 5 of block i / 5 -- still a pure function of (seed, i). */
    float *f = (float *)p, lo = (float)a, below = nextafterf((float)b, (float)a);
    const float step = (float)(b - a) * (1.0f / 16777216.0f);
    uint64_t blk = first_index / 5;
    unsigned slot = (unsigned)(first_index % 5);
    int64_t k = 0;
    philox_block r;
    if (slot != 0) { /* the rest of a block started before this range */
      r = block_for(seed, blk++);
      while (k < n && slot < 5)
        f[k++] = dt__philox_uniform_f32(bits24(&r, slot++), lo, step, below);
    }
    for (; k + 5 <= n; k += 5) { /* whole blocks: five elements each */
      r = block_for(seed, blk++);
      for (unsigned w = 0; w < 5; w++)
        f[k + w] = dt__philox_uniform_f32(bits24(&r, w), lo, step, below);
    }
    if (k < n) r = block_for(seed, blk); /* the head of the last block */
    for (unsigned w = 0; k < n; w++)
      f[k++] = dt__philox_uniform_f32(bits24(&r, w), lo, step, below);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    char *e = p + i * (int64_t)esize;
    double v = random_value(kind, a, b, seed, first_index + (uint64_t)i);
    if (kind == DT_RANDOM_UNIFORM) {
      dt__philox_store_uniform(t->dtype, e, v, a, b); /* kept below b after rounding */
    } else {
      dt__store_from_double(t->dtype, e, v);
    }
  }
}

dt_status dt__random_fill_block(dt_tensor *t, dt_random_kind kind, double a, double b,
                                uint64_t seed, int ndim, const int64_t *global_shape,
                                const int64_t *offset) {
  /* Runs: the trailing dims the block spans whole, times the innermost partial dim, are one
   * contiguous stretch of the global flat index (a whole tensor is a single run). */
  int k = ndim - 1;
  while (k > 0 && t->shape[k] == global_shape[k] && offset[k] == 0) k--;
  int64_t run = 1, runs = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    if (d >= k)
      run *= t->shape[d];
    else
      runs *= t->shape[d];
  }
  int64_t index[DT_MAX_DIMS] = {0};
  for (int64_t r = 0; r < runs && run > 0; r++) {
    uint64_t flat = 0;
    for (int d = 0; d < ndim; d++) {
      int64_t i = (d >= k ? 0 : index[d]) + offset[d];
      flat = flat * (uint64_t)global_shape[d] + (uint64_t)i;
    }
    dt_tensor part = *t; /* a 1-D view of run r on the stack: no allocation */
    part.ndim = 1;
    part.shape[0] = run;
    part.strides[0] = 1;
    part.offset = t->offset + r * run;
    dt__random_fill_checked(&part, kind, a, b, seed, flat);
    for (int d = k - 1; d >= 0; d--) {
      if (++index[d] < t->shape[d]) break;
      index[d] = 0;
    }
  }
  return DT_OK;
}

static dt_status random_create(const char *op, int ndim, const int64_t *shape, dt_dtype dtype,
                               dt_random_kind kind, double a, double b, uint64_t seed,
                               dt_tensor **out) {
  dt_status st = dt__check_create(op, ndim, shape, dtype, out);
  if (st) return st;
  if (kind != DT_RANDOM_INTEGER && !dt_dtype_is_floating(dtype)) {
    return dt__error(DT_ERR_DTYPE, "%s: needs a floating dtype, got %s", op, dt_dtype_name(dtype));
  }
  if (kind == DT_RANDOM_INTEGER) {
    st = check_integer_range(op, a, b, dtype);
    if (st) return st;
  }
  st = dt__tensor_new(ndim, shape, dtype, out);
  if (st) return st;
  st = dt_random_fill(*out, kind, a, b, seed, 0);
  if (st) {
    dt_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

dt_status dt_rand(int ndim, const int64_t *shape, dt_dtype dtype, uint64_t seed, dt_tensor **out) {
  return random_create("rand", ndim, shape, dtype, DT_RANDOM_UNIFORM, 0.0, 1.0, seed, out);
}

dt_status dt_randn(int ndim, const int64_t *shape, dt_dtype dtype, uint64_t seed, dt_tensor **out) {
  return random_create("randn", ndim, shape, dtype, DT_RANDOM_NORMAL, 0.0, 1.0, seed, out);
}

dt_status dt_randint(int64_t low, int64_t high, int ndim, const int64_t *shape, dt_dtype dtype,
                     uint64_t seed, dt_tensor **out) {
  return random_create("randint", ndim, shape, dtype, DT_RANDOM_INTEGER, (double)low, (double)high,
                       seed, out);
}
