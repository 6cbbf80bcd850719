/* Private layout of tensors and storage, and helpers shared by kernels and ops. */
#ifndef DT_TENSOR_IMPL_H
#define DT_TENSOR_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/core_impl.h"
#include "dtensor/tensor.h"
#include "tensor/dtype_impl.h"

/* Storage: one refcounted buffer shared by a tensor and all its views. */
typedef struct dt_storage {
  atomic_int refcount;
  bool owns_data; /* false for dt_wrap: caller memory, never freed here */
  /* The device the data lives on, as dt__device_key (tensor/device_impl.h): 0 is the CPU. Data
   * of another device is its allocator's, freed through it. */
  uint32_t device;
  void *data; /* owned data starts DT_STORAGE_HEADER bytes after the header */
  size_t nbytes;
  /* Bumped by every in-place op while autograd is in use: a tensor saved for backward
   * remembers the version it had, and backward refuses to read a modified one. */
  uint32_t version;
  /* Memory owned outside the library (dt_wrap_ex: a DLPack producer's tensor, a safetensors
   * map): called once, with release_user, when the last handle or view lets go. */
  void (*release)(void *user);
  void *release_user;
} dt_storage;

/* A tensor made by dt__tensor_new is one allocation: the storage header, then the tensor's
 * own handle, then the data (64-byte aligned). The block is freed when the storage's last
 * reference goes, whether that is the handle's or a view's. */
#define DT_STORAGE_HEADER 64
#define DT_EMBEDDED_HANDLE_OFFSET DT_STORAGE_HEADER
#define DT_EMBEDDED_DATA_OFFSET 320

/* Distributed-tensor spec; defined by the dist layer. NULL for a local tensor. */
struct dt_dist_spec;

/* State a layer above attaches to a tensor (autograd's meta, src/autograd). It carries the
 * function that frees it, so that the tensor layer releases it without knowing that layer. */
typedef struct dt_tensor_ext {
  void (*destroy)(struct dt_tensor_ext *ext);
} dt_tensor_ext;

struct dt_tensor {
  atomic_int refcount;
  dt_dtype dtype;
  int ndim;
  int64_t shape[DT_MAX_DIMS];
  int64_t strides[DT_MAX_DIMS]; /* in elements; may be 0 (expand) */
  int64_t offset;               /* in elements, from storage->data */
  dt_storage *storage;
  struct dt_dist_spec *spec; /* owned by the tensor; NULL when local */
  bool embedded;             /* the handle lives inside its storage's allocation */
  dt_tensor_ext *autograd;   /* owned; NULL unless autograd touched the tensor */
};

/* A tensor's spec is released through dt__upcall.spec_release (core/core_impl.h). */

/* Releases tensors[0..n) and then frees the array itself (NULL entries and a NULL array are
 * fine): the end of an owned list of tensor references. */
void dt__tensors_free(dt_tensor **tensors, int n);
/* Releases tensors[0..n) and sets them to NULL; the array stays the caller's: results taken
 * back on a failure. */
void dt__tensors_clear(dt_tensor **tensors, int n);

static inline int64_t dt__numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

static inline int64_t dt__tensor_numel(const dt_tensor *t) { return dt__numel(t->ndim, t->shape); }

static inline char *dt__tensor_base(const dt_tensor *t) {
  return (char *)t->storage->data + t->offset * (int64_t)dt__dtype_sizes[t->dtype];
}

/* The largest element count, and the largest product of a shape's sizes with its zero sizes
 * counted as 1 (what contiguous strides and view offsets reach), that a tensor may have.
 * dt__check_shape and dt__tensor_new enforce it, so that no product of sizes and strides
 * computed by a view can overflow int64 and element offsets times an element size still fit. */
#define DT_MAX_NUMEL (INT64_MAX / 16)

/* Row-major contiguous strides for a shape. The shape must have passed dt__check_shape or
 * dt__tensor_new (the strides then cannot overflow, even when a size is 0). */
static inline void dt__contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i] > 1 ? shape[i] : 1;
  }
}

static inline bool dt__is_contiguous(int ndim, const int64_t *shape, const int64_t *strides) {
  int64_t expected = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    if (shape[i] == 1) continue;
    if (shape[i] == 0) return true;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

/* Validates a user-given (ndim, shape): sizes >= 0, at most DT_MAX_NUMEL elements, and the
 * product of its sizes with zeros counted as 1 at most DT_MAX_NUMEL, so that its contiguous
 * strides fit in int64 ([0, 2^62, 2^62] has no elements but a stride of 2^124). `op` names
 * the caller in the error message (DT_ERR_INVALID). */
dt_status dt__check_shape(const char *op, int ndim, const int64_t *shape);

/* What every factory checks first: out not NULL (then *out = NULL), the shape
 * (dt__check_shape) and the dtype (DT_ERR_DTYPE). `op` names the caller in the message. */
dt_status dt__check_create(const char *op, int ndim, const int64_t *shape, dt_dtype dtype,
                           dt_tensor **out);

/* Normalizes a possibly negative dim against ndim (a scalar accepts -1 and 0 when
 * allow_scalar). Returns DT_ERR_INVALID with a message naming op and dim otherwise. */
dt_status dt__normalize_dim(const char *op, int64_t dim, int ndim, int *out);

/* dt_arange's element count for (start, end, step), checked (messages name op). */
dt_status dt__arange_count(const char *op, double start, double end, double step, dt_dtype dtype,
                           int64_t *n);
/* Fills the contiguous 1-D t with start + (first + i) * step: elements first.. of an arange. */
void dt__arange_fill(dt_tensor *t, double start, double step, int64_t first);

/* A new contiguous tensor with uninitialised contents. */
dt_status dt__tensor_new(int ndim, const int64_t *shape, dt_dtype dtype, dt_tensor **out);

/* A new handle viewing base's storage with the given geometry (storage retained). The spec
 * is not copied. */
dt_status dt__tensor_view(const dt_tensor *base, int ndim, const int64_t *shape,
                          const int64_t *strides, int64_t offset, dt_tensor **out);

/* dt_random_fill without its argument checks (t contiguous, kind valid, floating dtype for
 * uniform and normal, a non-empty integral range for integers): for callers that checked. */
void dt__random_fill_checked(dt_tensor *t, dt_random_kind kind, double a, double b, uint64_t seed,
                             uint64_t first_index);

/* Fills the contiguous tensor t, which is the block of a global tensor of `global_shape`
 * starting at `offset` (ndim entries each), with the global tensor's random elements. */
dt_status dt__random_fill_block(dt_tensor *t, dt_random_kind kind, double a, double b,
                                uint64_t seed, int ndim, const int64_t *global_shape,
                                const int64_t *offset);

/* True when b reads a's storage through a different layout than a's own, so that writing a
 * element by element could change b's elements before they are read (a.add_(a.t())). */
bool dt__overlaps_differently(const dt_tensor *a, const dt_tensor *b);

/* True when several elements of t are one memory location (a stride-0 dim of size > 1, as
 * expand makes): writing t in place would be ill-defined, as PyTorch also refuses. */
static inline bool dt__has_internal_overlap(const dt_tensor *t) {
  for (int i = 0; i < t->ndim; i++) {
    if (t->strides[i] == 0 && t->shape[i] > 1) return true;
  }
  return false;
}
dt_status dt__error_internal_overlap(const char *op);

/* Refuses a fill value an integer dtype cannot hold (NaN, inf, out of range), as PyTorch
 * does, rather than store garbage: DT_ERR_INVALID naming op. Floating dtypes take anything
 * (overflowing to inf), bool takes anything (nonzero is true), and integers truncate a
 * fractional value toward zero. */
dt_status dt__check_fill_value(const char *op, double value, dt_dtype dtype);

/* Strided element iteration: calls advance over a multi-index in row-major order. */
typedef struct dt_index_iter {
  int ndim;
  int64_t shape[DT_MAX_DIMS];
  int64_t index[DT_MAX_DIMS];
} dt_index_iter;

static inline void dt__iter_init(dt_index_iter *it, int ndim, const int64_t *shape) {
  it->ndim = ndim;
  for (int i = 0; i < ndim; i++) {
    it->shape[i] = shape[i];
    it->index[i] = 0;
  }
}

/* Advances to the next multi-index; returns the dimension that changed slowest, or -1 when
 * the iteration wrapped around (done). Offsets may be updated from the changed dims. */
static inline int dt__iter_next(dt_index_iter *it) {
  for (int d = it->ndim - 1; d >= 0; d--) {
    if (++it->index[d] < it->shape[d]) return d;
    it->index[d] = 0;
  }
  return -1;
}

static inline int64_t dt__offset_of(const int64_t *index, const int64_t *strides, int ndim) {
  int64_t off = 0;
  for (int i = 0; i < ndim; i++) off += index[i] * strides[i];
  return off;
}

/* Sizes read as plain numbers through the public API (dt_tensor_size, dt_tensor_shape,
 * dt_tensor_numel, dt_tensor_strides, dt_tensor_offset, dt_dist_global_shape): a tracer that
 * gives sizes symbols must know when its function reads one, since the number it then passes on
 * is a constant of the trace. compile installs `read` on its thread while it traces (and only
 * there) and specializes the dim read (a guard that it keeps its traced size, as PyTorch's int()
 * of a SymInt does). dim is the dim read, or -1 for all of them; fn names the accessor. Library
 * code whose reads put no number into the trace (dispatch, autograd's bookkeeping, a loss's
 * count passed on as a size note) reads the fields instead; a library function that passes a
 * size on as a number (a model's forward reading its batch) reads through the accessors and is
 * specialized like the function's own code. Per thread; read == NULL when nothing traces. */
typedef struct dt__size_read_hook {
  void (*read)(void *user, const dt_tensor *t, int dim, const char *fn);
  void *user;
} dt__size_read_hook;

extern _Thread_local dt__size_read_hook dt__size_reader;

/* Tells the hook, when one is installed, that size `dim` (-1: all) of t was read by fn. */
void dt__size_read(const dt_tensor *t, int dim, const char *fn);

#endif /* DT_TENSOR_IMPL_H */
