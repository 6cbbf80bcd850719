/*
 * libdtensor — tensors: dtypes, the tensor handle, creation, data access, random numbers.
 *
 * A dt_tensor is an opaque, reference-counted handle. It is the same handle for a local
 * tensor and for a distributed one (which also carries a spec: mesh and placements); every
 * op accepts both. Views (transpose, narrow, detach, ...) share storage with their base.
 *
 * Ownership: a function that returns a tensor through `dt_tensor **out` hands the caller one
 * reference, released with dt_tensor_release(). On failure *out is set to NULL. Arguments
 * are borrowed: the callee retains what it keeps.
 */
#ifndef DTENSOR_TENSOR_H
#define DTENSOR_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtensor/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most dimensions a tensor may have. */
#define DT_MAX_DIMS 8

/* Element types. bf16 and f16 are stored as 16-bit patterns and computed in f32. */
#define DT_DTYPE_MAP(X)                                                                            \
  X(DT_F32, "float32", 4)                                                                          \
  X(DT_F64, "float64", 8)                                                                          \
  X(DT_BF16, "bfloat16", 2)                                                                        \
  X(DT_F16, "float16", 2)                                                                          \
  X(DT_I64, "int64", 8)                                                                            \
  X(DT_I32, "int32", 4)                                                                            \
  X(DT_U8, "uint8", 1)                                                                             \
  X(DT_BOOL, "bool", 1)

typedef enum dt_dtype {
#define DT_DTYPE_ENUM(name, text, size) name,
  DT_DTYPE_MAP(DT_DTYPE_ENUM)
#undef DT_DTYPE_ENUM
      DT_DTYPE_COUNT
} dt_dtype;

/* "float32", "int64", ... ; "invalid" for an out-of-range value. */
DT_API const char *dt_dtype_name(dt_dtype dtype);
/* Bytes per element; 0 for an invalid dtype. */
DT_API size_t dt_dtype_size(dt_dtype dtype);
/* True for f32, f64, bf16, f16. */
DT_API bool dt_dtype_is_floating(dt_dtype dtype);
/* The dtype two operands promote to (PyTorch's rules for tensors of equal standing):
 * bool < u8 < i32 < i64 < floating; f16 with bf16 gives f32; the wider float wins. */
DT_API dt_dtype dt_dtype_promote(dt_dtype a, dt_dtype b);

/* Conversions between f32 and the 16-bit float formats (round to nearest even). */
DT_API uint16_t dt_f32_to_bf16(float value);
DT_API float dt_bf16_to_f32(uint16_t bits);
DT_API uint16_t dt_f32_to_f16(float value);
DT_API float dt_f16_to_f32(uint16_t bits);

typedef struct dt_tensor dt_tensor;

/* ---- Devices -------------------------------------------------------------------------------
 * A tensor lives on one device: its storage's, which its views share. The CPU is device
 * {DT_DEVICE_CPU, 0}, the zero value, and the default everywhere. An op whose tensor arguments
 * are on different devices fails (DT_ERR_INVALID, naming both); dt_to_device is the one way
 * across. Memory of a device the host cannot read (a GPU's) is never dereferenced by host code:
 * dt_tensor_data, element access, printing, checkpoints and DLPack export refuse it with a
 * message that says to copy it to the CPU first. */
typedef enum dt_device_kind {
  DT_DEVICE_CPU = 0,
  DT_DEVICE_CUDA = 1, /* NVIDIA GPUs; available when libdtensor is built with CUDA */
} dt_device_kind;

typedef struct dt_device {
  dt_device_kind kind;
  int index; /* which device of its kind (0 for the CPU) */
} dt_device;

/* The CPU device, as a value. */
#define DT_DEVICE_CPU_VALUE ((dt_device){DT_DEVICE_CPU, 0})

/* Options of the factories' _ex forms. A zeroed struct (or NULL) means the CPU. */
typedef struct dt_tensor_options {
  dt_device device;
} dt_tensor_options;

/* The device kind's name ("cpu", "cuda"), or NULL for a kind no device registered. */
DT_API const char *dt_device_kind_name(int kind);
/* Writes "cpu" or "cuda:1" into buf (truncated to size) and returns buf ("" for a NULL buf
 * or size 0). Error messages name devices this way. */
DT_API const char *dt_device_format(dt_device device, char *buf, size_t size);
/* Parses "cpu", "cuda", "cuda:1" (the names of the registered device kinds). Errors:
 * DT_ERR_INVALID (NULL argument, an unknown name or a bad index). */
DT_API dt_status dt_device_parse(const char *text, dt_device *out);
/* True when a device of this kind and index is present in this process (the CPU always;
 * CUDA only in a CUDA build with a GPU). */
DT_API bool dt_device_available(dt_device device);

/* ---- Reference counting ------------------------------------------------------------ */

/* Adds a reference and returns t (NULL is allowed and returned). Thread-safe. */
DT_API dt_tensor *dt_tensor_retain(dt_tensor *t);
/* Drops a reference; the last one frees the handle and, if no view remains, the storage.
 * NULL is allowed. Thread-safe. */
DT_API void dt_tensor_release(dt_tensor *t);

/* A list of temporaries released together: code that makes many intermediate tensors (a
 * model's forward) keeps each on the list and releases them all at the end, on success and on
 * failure alike. A plain struct, zero-initialised (DT_TENSOR_LIST_INIT) on the stack:
 *   dt_tensor_list tmp = DT_TENSOR_LIST_INIT;
 *   dt_tensor *h = dt_tensor_list_keep(&tmp, made_by_an_op);
 *   ...
 *   dt_tensor_list_release(&tmp);
 * Not thread-safe (one list per thread). */
typedef struct dt_tensor_list {
  dt_tensor **items;
  int count, capacity;
} dt_tensor_list;
#define DT_TENSOR_LIST_INIT                                                                        \
  { NULL, 0, 0 }
/* Takes over the caller's reference to t and returns t (NULL is returned as NULL and nothing
 * kept). When the list cannot grow, t is released at once, NULL returned and the error set
 * (DT_ERR_NOMEM): a caller passing the result to the next op gets that op's NULL-argument
 * error, or checks it. NULL list: t is released, NULL returned. */
DT_API dt_tensor *dt_tensor_list_keep(dt_tensor_list *list, dt_tensor *t);
/* Releases every tensor on the list (last kept first) and frees its array; the list is empty
 * and reusable afterwards. NULL is ignored. */
DT_API void dt_tensor_list_release(dt_tensor_list *list);

/* ---- Creation (local tensors) -------------------------------------------------------- */
/* Each creates a new contiguous tensor and hands the caller one reference. Errors:
 * DT_ERR_INVALID (NULL out, ndim outside 0..DT_MAX_DIMS, negative size, NULL shape with
 * ndim > 0), DT_ERR_DTYPE (invalid dtype), DT_ERR_NOMEM. */

DT_API dt_status dt_empty(int ndim, const int64_t *shape, dt_dtype dtype, dt_tensor **out);
DT_API dt_status dt_zeros(int ndim, const int64_t *shape, dt_dtype dtype, dt_tensor **out);
DT_API dt_status dt_ones(int ndim, const int64_t *shape, dt_dtype dtype, dt_tensor **out);
DT_API dt_status dt_full(int ndim, const int64_t *shape, double value, dt_dtype dtype,
                         dt_tensor **out);
/* A 1-D tensor of start, start+step, ... below end (above, for a negative step).
 * DT_ERR_INVALID for step 0, a non-finite bound, or a value an integer dtype cannot hold
 * (uint8 past 255, ...); DT_ERR_DTYPE for bool. */
DT_API dt_status dt_arange(double start, double end, double step, dt_dtype dtype, dt_tensor **out);
/* Copies `data` (contiguous, row-major, ndim/shape elements of dtype) into a new tensor. */
DT_API dt_status dt_from_data(const void *data, int ndim, const int64_t *shape, dt_dtype dtype,
                              dt_tensor **out);
/* The factories on a device: options->device (NULL options: the CPU). A non-CPU tensor is
 * filled on the host and copied to its device. Errors: those of the basic forms, and
 * DT_ERR_UNSUPPORTED naming the device when it is not available (dt_device_available). */
DT_API dt_status dt_empty_ex(int ndim, const int64_t *shape, dt_dtype dtype,
                             const dt_tensor_options *options, dt_tensor **out);
DT_API dt_status dt_full_ex(int ndim, const int64_t *shape, double value, dt_dtype dtype,
                            const dt_tensor_options *options, dt_tensor **out);
DT_API dt_status dt_from_data_ex(const void *data, int ndim, const int64_t *shape, dt_dtype dtype,
                                 const dt_tensor_options *options, dt_tensor **out);
/* Wraps caller memory without copying: the tensor borrows `data`, a buffer of `nbytes` bytes
 * which must outlive every handle and view made from it. `strides` (in elements, >= 0) may be
 * NULL for contiguous. The buffer must hold the largest element offset the geometry reaches,
 * sum over dims of (size - 1) * stride, plus one element; an empty shape needs no bytes (data
 * may then be NULL). Errors: DT_ERR_INVALID (NULL out, bad shape, NULL data for a non-empty
 * shape, a negative stride, strides whose sum of size * stride passes 2^59 elements, nbytes
 * too small), DT_ERR_DTYPE, DT_ERR_NOMEM. */
DT_API dt_status dt_wrap(void *data, size_t nbytes, int ndim, const int64_t *shape,
                         const int64_t *strides, dt_dtype dtype, dt_tensor **out);
/* As dt_wrap, for memory owned elsewhere that must be given back: `release(user)` (may be
 * NULL) is called exactly once, on whichever thread drops the last handle or view of the
 * tensor. On an error nothing is wrapped and release is not called: the caller keeps the
 * memory. Errors: those of dt_wrap. */
DT_API dt_status dt_wrap_ex(void *data, size_t nbytes, int ndim, const int64_t *shape,
                            const int64_t *strides, dt_dtype dtype, void (*release)(void *user),
                            void *user, dt_tensor **out);

/* ---- Random numbers (counter-based, Philox4x32-10) ---------------------------------------
 * Element i of the result (row-major index in the full tensor) depends only on (seed, i),
 * never on how or where the tensor is made: the slice [a, b) of a random tensor can be
 * generated alone with dt_random_fill and equals the same slice of the whole tensor.
 * rand: uniform in [0, 1); randn: standard normal; randint: uniform integers in [low, high).
 * float32 uniforms use 24 random bits each (five per Philox block), other dtypes 53 bits.
 * Errors: those of dt_empty; DT_ERR_DTYPE (rand/randn of a non-floating dtype);
 * DT_ERR_INVALID (randint: an empty range, bounds beyond +-2^53, or values the dtype cannot
 * hold). */

DT_API dt_status dt_rand(int ndim, const int64_t *shape, dt_dtype dtype, uint64_t seed,
                         dt_tensor **out);
DT_API dt_status dt_randn(int ndim, const int64_t *shape, dt_dtype dtype, uint64_t seed,
                          dt_tensor **out);
DT_API dt_status dt_randint(int64_t low, int64_t high, int ndim, const int64_t *shape,
                            dt_dtype dtype, uint64_t seed, dt_tensor **out);

typedef enum dt_random_kind {
  DT_RANDOM_UNIFORM = 0, /* [a, b) */
  DT_RANDOM_NORMAL = 1,  /* mean a, standard deviation b */
  DT_RANDOM_INTEGER = 2, /* integers in [a, b) */
} dt_random_kind;

/* Fills the contiguous tensor t in place with elements first_index, first_index+1, ... of
 * the random stream (seed, kind, a, b). Used to generate one shard of a larger tensor.
 * Errors: DT_ERR_INVALID (NULL, non-contiguous t, an unknown kind, an empty range),
 * DT_ERR_DTYPE (uniform/normal into a non-floating dtype). */
DT_API dt_status dt_random_fill(dt_tensor *t, dt_random_kind kind, double a, double b,
                                uint64_t seed, uint64_t first_index);

/* ---- Inspection ---------------------------------------------------------------------- */
/* For a distributed tensor these describe the local shard (the global shape is in its spec:
 * dt_dist_global_shape). Arrays returned are borrowed and valid while t lives. A NULL tensor
 * gives 0, NULL, false, or DT_DTYPE_COUNT for the dtype. */

DT_API int dt_tensor_ndim(const dt_tensor *t);
/* Size of dimension dim (negative counts from the end); -1 if dim is out of range. */
DT_API int64_t dt_tensor_size(const dt_tensor *t, int dim);
DT_API const int64_t *dt_tensor_shape(const dt_tensor *t);
/* Strides in elements. */
DT_API const int64_t *dt_tensor_strides(const dt_tensor *t);
DT_API int64_t dt_tensor_offset(const dt_tensor *t);
DT_API int64_t dt_tensor_numel(const dt_tensor *t);
DT_API dt_dtype dt_tensor_dtype(const dt_tensor *t);
DT_API bool dt_tensor_is_contiguous(const dt_tensor *t);
/* True when a and b view the same storage. */
DT_API bool dt_tensor_shares_storage(const dt_tensor *a, const dt_tensor *b);
/* True when t is a distributed tensor (carries a spec). */
DT_API bool dt_tensor_is_distributed(const dt_tensor *t);
/* Pointer to element 0 of t (storage base + offset). Borrowed; valid while t lives. NULL
 * (with dt_last_error() saying to copy it to the CPU first) for a tensor on a device whose
 * memory the host cannot read. */
DT_API void *dt_tensor_data(const dt_tensor *t);
/* The device t lives on (its storage's); the CPU for NULL. */
DT_API dt_device dt_tensor_device(const dt_tensor *t);
/* t on `device`: a new contiguous copy there, or, when t already lives there, t itself (a
 * new reference, as PyTorch's to() returns self). The caller owns *out. Not recorded by
 * autograd. Errors: DT_ERR_INVALID (NULL t or out), DT_ERR_UNSUPPORTED (a device that is not
 * available, naming it; a distributed t: move its local shard; a t that requires grad), the
 * errors of a copy on the source device (a device without a contiguous kernel), DT_ERR_NOMEM. */
DT_API dt_status dt_to_device(dt_tensor *t, dt_device device, dt_tensor **out);
/* Current reference count (for tests and debugging). */
DT_API int dt_tensor_refcount(const dt_tensor *t);

/* Copies t's elements, row-major, converted to double, into out[0..capacity). Handles any
 * strides. A distributed t gives its local shard (dt_dist_full_tensor first for the whole).
 * DT_ERR_INVALID if capacity < numel; DT_ERR_UNSUPPORTED for a tensor the host cannot read (copy it
 * to the CPU first). The same holds for get, set and format. */
DT_API dt_status dt_tensor_to_doubles(const dt_tensor *t, double *out, int64_t capacity);
/* Reads one element at a multi-index (ndim entries; NULL for a 0-d tensor, e.g. a loss) as
 * double. A distributed t reads its local shard (dt_dist_to_local's view).
 * Errors: DT_ERR_INVALID (NULL t or value, NULL index with ndim > 0), DT_ERR_INDEX (index out
 * of range). */
DT_API dt_status dt_tensor_get(const dt_tensor *t, const int64_t *index, double *value);
/* Writes one element at a multi-index, converting from double. Errors as dt_tensor_get. */
DT_API dt_status dt_tensor_set(dt_tensor *t, const int64_t *index, double value);

/* Writes a short human-readable rendering of t ("tensor([[1, 2], [3, 4]], dtype=float32)")
 * into buf, truncated to size. Returns DT_ERR_INVALID for NULL arguments or size 0. */
DT_API dt_status dt_tensor_format(const dt_tensor *t, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_TENSOR_H */
