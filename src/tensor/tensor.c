/* The tensor handle: lifetime, geometry, views and element access. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "core/thread_key.h"
#include "tensor/device_impl.h"

/* Owned data lives in the same allocation as its storage header (one malloc per tensor), or
 * on another device comes from that device's allocator; borrowed data (dt_wrap, and
 * dt__wrap_on for device memory) is never freed here, but its owner's release function (dt_wrap_ex)
 * runs once, after the last reference. Either way one free releases the storage. */
static void storage_release(dt_storage *s) {
  if (!s) return;
  if (atomic_fetch_sub_explicit(&s->refcount, 1, memory_order_acq_rel) != 1) return;
  void (*release)(void *) = s->release;
  void *user = s->release_user;
  if (DT_UNLIKELY(s->device != 0) && s->owns_data) { /* data from a device's allocator */
    const dt_device_memory *m = dt__device_memory((int)(s->device & 0xffu));
    if (m && s->data) m->free((int)(s->device >> 8), s->data);
  }
  dt__free(s);
  if (release) release(user);
}

/* View handles are recycled through a small per-thread pool: creating and dropping views
 * (detach, transpose, a distributed op's output handle) then costs no malloc/free. A handle
 * released on another thread simply joins that thread's pool. */
#define HANDLE_POOL_MAX 64

typedef struct handle_pool {
  int count;
  dt_tensor *handles[HANDLE_POOL_MAX];
} handle_pool;

static _Thread_local handle_pool *pool;
static _Thread_local bool pool_dead; /* destroyed at thread exit: free handles directly */

static void pool_destroy(void *p) {
  handle_pool *hp = p;
  pool = NULL;
  pool_dead = true;
  for (int i = 0; i < hp->count; i++) dt__free(hp->handles[i]);
  dt__free(hp);
}

static dt_thread_key pool_key = DT_THREAD_KEY_INIT(pool_destroy);

static handle_pool *thread_pool(void) {
  if (DT_LIKELY(pool != NULL)) return pool;
  if (pool_dead) return NULL;
  pool = dt__thread_key_set(&pool_key, dt__calloc(sizeof *pool));
  return pool;
}

static void handle_free(dt_tensor *t) {
  handle_pool *hp = thread_pool();
  if (hp && hp->count < HANDLE_POOL_MAX) {
    hp->handles[hp->count++] = t;
  } else {
    dt__free(t);
  }
}

dt_tensor *dt_tensor_retain(dt_tensor *t) {
  if (t) atomic_fetch_add_explicit(&t->refcount, 1, memory_order_relaxed);
  return t;
}

void dt_tensor_release(dt_tensor *t) {
  if (!t) return;
  if (atomic_fetch_sub_explicit(&t->refcount, 1, memory_order_acq_rel) != 1) return;
  if (t->spec && dt__upcall.spec_release) dt__upcall.spec_release(t->spec);
  if (DT_UNLIKELY(t->autograd != NULL)) {
    t->autograd->destroy(t->autograd);
    t->autograd = NULL; /* a pooled handle comes back without autograd state */
  }
  bool embedded = t->embedded;
  storage_release(t->storage); /* may free t itself when embedded */
  if (!embedded) handle_free(t);
}

void dt__tensors_clear(dt_tensor **tensors, int n) {
  for (int i = 0; i < n; i++) {
    dt_tensor_release(tensors[i]);
    tensors[i] = NULL;
  }
}

void dt__tensors_free(dt_tensor **tensors, int n) {
  if (!tensors) return;
  for (int i = 0; i < n; i++) dt_tensor_release(tensors[i]);
  dt__free(tensors);
}

/* The product of a shape's sizes with zero sizes counted as 1: the element count of a
 * non-empty shape, and what the contiguous strides and view offsets of any shape reach. False
 * when it overflows uint64. Sizes must be >= 0. */
static bool shape_span(int ndim, const int64_t *shape, uint64_t *span, bool *empty) {
  uint64_t p = 1;
  bool overflow = false;
  *empty = false;
  for (int i = 0; i < ndim; i++) {
    *empty |= shape[i] == 0;
    overflow |= __builtin_mul_overflow(p, shape[i] > 1 ? (uint64_t)shape[i] : 1u, &p);
  }
  *span = p;
  return !overflow;
}

/* The error for a shape whose span passes DT_MAX_NUMEL: a non-empty one has too many
 * elements; an empty one would overflow its strides. */
static dt_status span_error(const char *op, int ndim, const int64_t *shape, bool empty) {
  char buf[160];
  dt__format_ints(buf, sizeof buf, ndim, shape);
  if (empty) {
    return dt__error(DT_ERR_INVALID,
                     "%s: shape %s has no elements but its nonzero sizes multiply past %" PRId64
                     ", so its strides would overflow",
                     op, buf, (int64_t)DT_MAX_NUMEL);
  }
  return dt__error(DT_ERR_INVALID, "%s: shape %s has too many elements (more than %" PRId64 ")", op,
                   buf, (int64_t)DT_MAX_NUMEL);
}

dt_status dt__check_shape(const char *op, int ndim, const int64_t *shape) {
  if (ndim < 0 || ndim > DT_MAX_DIMS) {
    return dt__error(DT_ERR_INVALID, "%s: ndim %d is outside 0..%d", op, ndim, DT_MAX_DIMS);
  }
  if (ndim > 0 && !shape)
    return dt__error(DT_ERR_INVALID, "%s: shape is NULL with ndim %d", op, ndim);
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) {
      char buf[160];
      return dt__error(DT_ERR_INVALID, "%s: negative size %" PRId64 " at dim %d of shape %s", op,
                       shape[i], i, dt__format_ints(buf, sizeof buf, ndim, shape));
    }
  }
  uint64_t span;
  bool empty;
  if (!shape_span(ndim, shape, &span, &empty) || span > (uint64_t)DT_MAX_NUMEL)
    return span_error(op, ndim, shape, empty);
  return DT_OK;
}

dt_status dt__normalize_dim(const char *op, int64_t dim, int ndim, int *out) {
  int64_t n = ndim > 0 ? ndim : 1; /* a scalar accepts dims -1 and 0 */
  if (dim < -n || dim >= n) {
    return dt__error(DT_ERR_INVALID,
                     "%s: dim %" PRId64 " is out of range for a %d-d tensor (expected %" PRId64
                     "..%" PRId64 ")",
                     op, dim, ndim, -n, n - 1);
  }
  *out = (int)(dim < 0 ? dim + n : dim);
  return DT_OK;
}

static dt_tensor *handle_alloc(void) {
  handle_pool *hp = thread_pool();
  dt_tensor *t;
  if (hp && hp->count) {
    t = hp->handles[--hp->count]; /* released handles keep autograd NULL */
  } else {
    t = dt__alloc_aligned(sizeof *t, 16);
    if (!t) return NULL;
    t->autograd = NULL;
  }
  t->spec = NULL;
  t->embedded = false;
  t->offset = 0;
  atomic_init(&t->refcount, 1);
  return t;
}

/* A new contiguous tensor in one block: storage header, handle, then (with_data) its bytes.
 * Without data, storage->data is NULL and nbytes is what the data needs. */
static dt_status new_block(int ndim, const int64_t *shape, dt_dtype dtype, bool with_data,
                           dt_tensor **out) {
  _Static_assert(DT_EMBEDDED_HANDLE_OFFSET >= sizeof(dt_storage), "storage header too small");
  _Static_assert(DT_EMBEDDED_DATA_OFFSET >= DT_EMBEDDED_HANDLE_OFFSET + sizeof(dt_tensor),
                 "embedded handle does not fit");
  *out = NULL;
  /* Output shapes come from ops (broadcasting, matmul, expand, cat): their sizes are checked
   * here, where the bytes are counted, so no product can wrap into a small allocation, and an
   * empty shape whose other sizes multiply past DT_MAX_NUMEL cannot overflow its strides. */
  uint64_t span;
  bool empty;
  if (!shape_span(ndim, shape, &span, &empty) || span > (uint64_t)DT_MAX_NUMEL) {
    char buf[160];
    return dt__error(DT_ERR_INVALID,
                     "a %s tensor of shape %s has too many elements to allocate (its sizes, "
                     "zeros counted as 1, multiply past %" PRId64 ")",
                     dt_dtype_name(dtype), dt__format_ints(buf, sizeof buf, ndim, shape),
                     (int64_t)DT_MAX_NUMEL);
  }
  /* span <= 2^59 and an element has at most 8 bytes: no overflow. */
  uint64_t nbytes = (empty ? 0 : span) * (uint64_t)dt__dtype_sizes[dtype];
  char *block = dt__alloc(DT_EMBEDDED_DATA_OFFSET + (with_data ? (size_t)nbytes : 0));
  if (!block) {
    char buf[160];
    return dt__error(DT_ERR_NOMEM, "cannot allocate %llu bytes for a %s tensor of shape %s",
                     (unsigned long long)nbytes, dt_dtype_name(dtype),
                     dt__format_ints(buf, sizeof buf, ndim, shape));
  }
  dt_storage *s = (dt_storage *)block;
  dt_tensor *t = (dt_tensor *)(block + DT_EMBEDDED_HANDLE_OFFSET);
  atomic_init(&s->refcount, 1);
  s->owns_data = true;
  s->device = 0;
  s->data = with_data ? block + DT_EMBEDDED_DATA_OFFSET : NULL;
  s->nbytes = nbytes;
  s->version = 0;
  s->release = NULL;
  s->release_user = NULL;
  atomic_init(&t->refcount, 1);
  t->dtype = dtype;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++) t->shape[i] = shape[i]; /* ndim <= 8: beats memcpy's call */
  dt__contiguous_strides(ndim, shape, t->strides);
  t->offset = 0;
  t->storage = s;
  t->spec = NULL;
  t->embedded = true;
  t->autograd = NULL;
  *out = t;
  return DT_OK;
}

dt_status dt__tensor_new(int ndim, const int64_t *shape, dt_dtype dtype, dt_tensor **out) {
  return new_block(ndim, shape, dtype, true, out);
}

/* On another device the header and handle are one host block, as a CPU tensor's, and the data
 * comes from the device's allocator; storage_release frees it through the same device. */
dt_status dt__tensor_new_on(dt_device device, int ndim, const int64_t *shape, dt_dtype dtype,
                            dt_tensor **out) {
  if (DT_LIKELY(device.kind == DT_DEVICE_CPU)) return new_block(ndim, shape, dtype, true, out);
  *out = NULL;
  const dt_device_memory *m = dt__device_memory((int)device.kind);
  if (!m) return dt__device_check_available("allocate", device);
  dt_tensor *t = NULL;
  dt_status st = new_block(ndim, shape, dtype, false, &t);
  if (st) return st;
  size_t nbytes = t->storage->nbytes;
  void *data = nbytes ? m->alloc(device.index, nbytes) : NULL;
  if (nbytes && !data) {
    dt_tensor_release(t);
    char name[48], buf[160];
    return dt__error(DT_ERR_NOMEM, "cannot allocate %zu bytes on %s for a %s tensor of shape %s",
                     nbytes, dt_device_format(device, name, sizeof name), dt_dtype_name(dtype),
                     dt__format_ints(buf, sizeof buf, ndim, shape));
  }
  t->storage->data = data;
  t->storage->device = dt__device_key(device);
  *out = t;
  return DT_OK;
}

dt_status dt__tensor_view(const dt_tensor *base, int ndim, const int64_t *shape,
                          const int64_t *strides, int64_t offset, dt_tensor **out) {
  *out = NULL;
  dt_tensor *t = handle_alloc();
  if (!t) return dt__error(DT_ERR_NOMEM, "cannot allocate a tensor handle");
  t->dtype = base->dtype;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++) { /* ndim <= 8: a loop beats memcpy's call */
    t->shape[i] = shape[i];
    t->strides[i] = strides[i];
  }
  t->offset = offset;
  t->storage = base->storage;
  atomic_fetch_add_explicit(&t->storage->refcount, 1, memory_order_relaxed);
  *out = t;
  return DT_OK;
}

dt_status dt_wrap(void *data, size_t nbytes, int ndim, const int64_t *shape, const int64_t *strides,
                  dt_dtype dtype, dt_tensor **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_wrap: out is NULL");
  *out = NULL;
  dt_status st = dt__check_shape("wrap", ndim, shape);
  if (st) return st;
  if (!dt__dtype_valid(dtype))
    return dt__error(DT_ERR_DTYPE, "dt_wrap: invalid dtype %d", (int)dtype);
  int64_t numel = dt__numel(ndim, shape);
  if (!data && numel > 0)
    return dt__error(DT_ERR_INVALID, "dt_wrap: data is NULL for %" PRId64 " elements", numel);
  /* reach bounds every offset a view can compute (narrow's start * stride, unsqueeze's
   * size * stride): the sum of size * stride. last is the largest element offset read: the
   * sum of (size - 1) * stride, at most reach. An empty tensor reads nothing. */
  uint64_t reach = 0, last = numel > 0 ? (uint64_t)numel - 1 : 0;
  if (strides) {
    bool overflow = false;
    last = 0;
    for (int i = 0; i < ndim; i++) {
      if (strides[i] < 0) {
        char sb[160];
        return dt__error(DT_ERR_INVALID,
                         "dt_wrap: negative stride %" PRId64
                         " at dim %d of strides %s (not supported)",
                         strides[i], i, dt__format_ints(sb, sizeof sb, ndim, strides));
      }
      uint64_t term;
      overflow |= __builtin_mul_overflow((uint64_t)shape[i], (uint64_t)strides[i], &term);
      overflow |= __builtin_add_overflow(reach, term, &reach);
      if (shape[i] > 0) last += (uint64_t)(shape[i] - 1) * (uint64_t)strides[i];
    }
    if (overflow || reach > (uint64_t)DT_MAX_NUMEL) {
      char sa[160], sb[160];
      return dt__error(DT_ERR_INVALID,
                       "dt_wrap: strides %s with shape %s reach element offsets past %" PRId64
                       " (the sum of size * stride overflows)",
                       dt__format_ints(sb, sizeof sb, ndim, strides),
                       dt__format_ints(sa, sizeof sa, ndim, shape), (int64_t)DT_MAX_NUMEL);
    }
  }
  /* last + 1 <= 2^59 elements of at most 8 bytes: no overflow. */
  uint64_t needed = numel > 0 ? (last + 1) * (uint64_t)dt__dtype_sizes[dtype] : 0;
  if (needed > nbytes) {
    char sa[160], sb[160];
    return dt__error(
        DT_ERR_INVALID,
        "dt_wrap: nbytes %zu is too small: a %s tensor of shape %s and strides %s reads "
        "up to element %" PRIu64 ", which needs %" PRIu64 " bytes",
        nbytes, dt_dtype_name(dtype), dt__format_ints(sa, sizeof sa, ndim, shape),
        strides ? dt__format_ints(sb, sizeof sb, ndim, strides) : "(contiguous)", last, needed);
  }
  dt_tensor *t = handle_alloc();
  dt_storage *s = dt__alloc(sizeof *s);
  if (!t || !s) {
    dt__free(t);
    dt__free(s);
    return dt__error(DT_ERR_NOMEM, "dt_wrap: cannot allocate a tensor handle");
  }
  atomic_init(&s->refcount, 1);
  s->owns_data = false;
  s->device = 0;
  s->data = data;
  s->nbytes = nbytes;
  s->version = 0;
  s->release = NULL;
  s->release_user = NULL;
  t->dtype = dtype;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++) t->shape[i] = shape[i]; /* ndim <= 8: beats memcpy's call */
  if (strides) {
    if (ndim > 0) memcpy(t->strides, strides, sizeof(int64_t) * (size_t)ndim);
  } else {
    dt__contiguous_strides(ndim, shape, t->strides);
  }
  t->storage = s;
  *out = t;
  return DT_OK;
}

dt_status dt_wrap_ex(void *data, size_t nbytes, int ndim, const int64_t *shape,
                     const int64_t *strides, dt_dtype dtype, void (*release)(void *user),
                     void *user, dt_tensor **out) {
  /* On failure nothing was wrapped, so release is not called: the caller still owns data. */
  dt_status st = dt_wrap(data, nbytes, ndim, shape, strides, dtype, out);
  if (st) {
    dt__error_prefix("dt_wrap_ex");
    return st;
  }
  (*out)->storage->release = release;
  (*out)->storage->release_user = user;
  return DT_OK;
}

dt_status dt__wrap_on(const char *op, dt_device device, void *data, size_t nbytes, int ndim,
                      const int64_t *shape, const int64_t *strides, dt_dtype dtype,
                      void (*release)(void *user), void *user, dt_tensor **out) {
  *out = NULL;
  dt_status st = dt__device_check_available(op, device);
  if (!st) st = dt_wrap_ex(data, nbytes, ndim, shape, strides, dtype, release, user, out);
  if (st) return st;
  /* borrowed (owns_data false): storage_release calls release, never the device's free */
  (*out)->storage->device = dt__device_key(device);
  return DT_OK;
}

int dt_tensor_ndim(const dt_tensor *t) { return t ? t->ndim : 0; }

_Thread_local dt__size_read_hook dt__size_reader;

void dt__size_read(const dt_tensor *t, int dim, const char *fn) {
  if (DT_UNLIKELY(dt__size_reader.read != NULL) && t)
    dt__size_reader.read(dt__size_reader.user, t, dim, fn);
}

int64_t dt_tensor_size(const dt_tensor *t, int dim) {
  if (!t) return -1;
  if (dim < 0) dim += t->ndim;
  if (dim < 0 || dim >= t->ndim) return -1;
  dt__size_read(t, dim, "dt_tensor_size");
  return t->shape[dim];
}

const int64_t *dt_tensor_shape(const dt_tensor *t) {
  dt__size_read(t, -1, "dt_tensor_shape");
  return t ? t->shape : NULL;
}
const int64_t *dt_tensor_strides(const dt_tensor *t) {
  dt__size_read(t, -1, "dt_tensor_strides");
  return t ? t->strides : NULL;
}
int64_t dt_tensor_offset(const dt_tensor *t) {
  dt__size_read(t, -1, "dt_tensor_offset");
  return t ? t->offset : 0;
}
int64_t dt_tensor_numel(const dt_tensor *t) {
  dt__size_read(t, -1, "dt_tensor_numel");
  return t ? dt__tensor_numel(t) : 0;
}
dt_dtype dt_tensor_dtype(const dt_tensor *t) { return t ? t->dtype : DT_DTYPE_COUNT; }
bool dt_tensor_is_contiguous(const dt_tensor *t) {
  return t && dt__is_contiguous(t->ndim, t->shape, t->strides);
}
bool dt_tensor_shares_storage(const dt_tensor *a, const dt_tensor *b) {
  return a && b && a->storage == b->storage;
}
bool dt_tensor_is_distributed(const dt_tensor *t) { return t && t->spec; }
void *dt_tensor_data(const dt_tensor *t) {
  if (!t || dt__check_host_readable("dt_tensor_data", t)) return NULL;
  return dt__tensor_base(t);
}
int dt_tensor_refcount(const dt_tensor *t) { return t ? atomic_load(&t->refcount) : 0; }

dt_status dt_tensor_to_doubles(const dt_tensor *t, double *out, int64_t capacity) {
  if (!t || !out)
    return dt__error(DT_ERR_INVALID, "dt_tensor_to_doubles: %s is NULL", t ? "out" : "tensor");
  dt_status st = dt__check_host_readable("dt_tensor_to_doubles", t);
  if (st) return st;
  int64_t numel = dt__tensor_numel(t);
  if (capacity < numel) {
    return dt__error(DT_ERR_INVALID, "dt_tensor_to_doubles: capacity %" PRId64 " < numel %" PRId64,
                     capacity, numel);
  }
  if (numel == 0) return DT_OK;
  size_t esize = dt__dtype_sizes[t->dtype];
  const char *base = dt__tensor_base(t);
  dt_index_iter it;
  dt__iter_init(&it, t->ndim, t->shape);
  int64_t i = 0;
  do {
    int64_t off = dt__offset_of(it.index, t->strides, t->ndim);
    out[i++] = dt__load_as_double(t->dtype, base + off * (int64_t)esize);
  } while (dt__iter_next(&it) >= 0);
  return DT_OK;
}

static dt_status check_index(const char *op, const dt_tensor *t, const int64_t *index) {
  if (!t) return dt__error(DT_ERR_INVALID, "%s: tensor is NULL", op);
  dt_status st = dt__check_host_readable(op, t);
  if (st) return st;
  if (t->ndim > 0 && !index) return dt__error(DT_ERR_INVALID, "%s: index is NULL", op);
  for (int i = 0; i < t->ndim; i++) {
    if (index[i] < 0 || index[i] >= t->shape[i]) {
      char buf[160], ibuf[160];
      return dt__error(DT_ERR_INDEX, "%s: index %s is out of range for %sshape %s%s", op,
                       dt__format_ints(ibuf, sizeof ibuf, t->ndim, index),
                       t->spec ? "the local shard's " : "",
                       dt__format_ints(buf, sizeof buf, t->ndim, t->shape),
                       t->spec ? " (t is distributed and this reads its local shard; "
                                 "dt_dist_full_tensor gives the whole tensor)"
                               : "");
    }
  }
  return DT_OK;
}

dt_status dt_tensor_get(const dt_tensor *t, const int64_t *index, double *value) {
  dt_status st = check_index("dt_tensor_get", t, index);
  if (st) return st;
  if (!value) return dt__error(DT_ERR_INVALID, "dt_tensor_get: value is NULL");
  int64_t off = dt__offset_of(index, t->strides, t->ndim);
  *value =
      dt__load_as_double(t->dtype, dt__tensor_base(t) + off * (int64_t)dt__dtype_sizes[t->dtype]);
  return DT_OK;
}

dt_status dt_tensor_set(dt_tensor *t, const int64_t *index, double value) {
  dt_status st = check_index("dt_tensor_set", t, index);
  if (st) return st;
  int64_t off = dt__offset_of(index, t->strides, t->ndim);
  t->storage->version++; /* an in-place write, as autograd's saved tensors see it */
  dt__store_from_double(t->dtype, dt__tensor_base(t) + off * (int64_t)dt__dtype_sizes[t->dtype],
                        value);
  return DT_OK;
}

/* Appends to buf at *used, never past size. */
static void append(char *buf, size_t size, size_t *used, const char *text) {
  if (*used + 1 >= size) return;
  int n = snprintf(buf + *used, size - *used, "%s", text);
  if (n > 0) *used = *used + (size_t)n < size ? *used + (size_t)n : size - 1;
}

static void format_rec(const dt_tensor *t, int dim, int64_t off, char *buf, size_t size,
                       size_t *used) {
  if (dim == t->ndim) {
    char num[40];
    double v =
        dt__load_as_double(t->dtype, dt__tensor_base(t) + off * (int64_t)dt__dtype_sizes[t->dtype]);
    if (dt_dtype_is_floating(t->dtype)) {
      snprintf(num, sizeof num, "%.4g", v);
    } else {
      snprintf(num, sizeof num, "%lld", (long long)v);
    }
    append(buf, size, used, num);
    return;
  }
  append(buf, size, used, "[");
  for (int64_t i = 0; i < t->shape[dim]; i++) {
    if (i) append(buf, size, used, ", ");
    if (i == 6 && t->shape[dim] > 8) { /* elide the middle of long dims */
      append(buf, size, used, "...");
      i = t->shape[dim] - 2;
      continue;
    }
    format_rec(t, dim + 1, off + i * t->strides[dim], buf, size, used);
  }
  append(buf, size, used, "]");
}

dt_status dt_tensor_format(const dt_tensor *t, char *buf, size_t size) {
  if (!t || !buf || size == 0)
    return dt__error(DT_ERR_INVALID, "dt_tensor_format: NULL argument or empty buffer");
  dt_status st = dt__check_host_readable("dt_tensor_format", t);
  if (st) return st;
  size_t used = 0;
  buf[0] = '\0';
  append(buf, size, &used, "tensor(");
  format_rec(t, 0, 0, buf, size, &used);
  append(buf, size, &used, ", dtype=");
  append(buf, size, &used, dt_dtype_name(t->dtype));
  append(buf, size, &used, ")");
  return DT_OK;
}

bool dt__overlaps_differently(const dt_tensor *a, const dt_tensor *b) {
  if (a->storage != b->storage) return false;
  if (a == b) return false;
  if (a->ndim != b->ndim || a->offset != b->offset) return true;
  for (int i = 0; i < a->ndim; i++) {
    if (a->shape[i] != b->shape[i] || (a->shape[i] > 1 && a->strides[i] != b->strides[i])) {
      return true;
    }
  }
  return false;
}

dt_status dt__error_internal_overlap(const char *op) {
  return dt__error(DT_ERR_INVALID,
                   "%s: self has elements that share one memory location (an expanded view); "
                   "clone it before writing in place",
                   op);
}
