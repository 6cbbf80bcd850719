/*
 * libdtensor — core: status codes, error messages, allocator hooks, logging.
 *
 * Every fallible function in libdtensor returns a dt_status: DT_OK (0) on success, a
 * negative code on failure. On failure it also sets a thread-local message, read with
 * dt_last_error(), that names the operation, the offending argument and what was expected.
 */
#ifndef DTENSOR_CORE_H
#define DTENSOR_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The library is built with hidden visibility; DT_API marks what it exports. */
#if defined(DT_BUILDING_LIBRARY)
#define DT_API __attribute__((visibility("default")))
#else
#define DT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define DT_VERSION_MAJOR 0
#define DT_VERSION_MINOR 1
#define DT_VERSION_PATCH 0

/* Status codes. 0 is success, every error is negative. */
#define DT_STATUS_MAP(X)                                                                           \
  X(DT_OK, 0, "success")                                                                           \
  X(DT_ERR_INVALID, -1, "invalid argument")                                                        \
  X(DT_ERR_NOMEM, -2, "out of memory")                                                             \
  X(DT_ERR_UNSUPPORTED, -3, "unsupported")                                                         \
  X(DT_ERR_SHAPE, -4, "incompatible shapes")                                                       \
  X(DT_ERR_DTYPE, -5, "unsupported or mismatched dtype")                                           \
  X(DT_ERR_INDEX, -6, "index out of range")                                                        \
  X(DT_ERR_TIMEOUT, -7, "timed out")                                                               \
  X(DT_ERR_ABORTED, -8, "aborted by a peer")                                                       \
  X(DT_ERR_MISMATCH, -9, "collective mismatch across ranks")                                       \
  X(DT_ERR_COMM, -10, "communication error")                                                       \
  X(DT_ERR_IO, -11, "input/output error")                                                          \
  X(DT_ERR_INTERNAL, -12, "internal error")

typedef enum dt_status {
#define DT_STATUS_ENUM(name, value, text) name = value,
  DT_STATUS_MAP(DT_STATUS_ENUM)
#undef DT_STATUS_ENUM
} dt_status;

/* A short, static description of a status code ("invalid argument"). Never NULL. */
DT_API const char *dt_status_string(dt_status status);

/* The detail message of the last failure on the calling thread, e.g.
 * "add.Tensor: shapes [2, 3] and [4] cannot be broadcast". Empty if nothing failed yet.
 * The string is owned by the library and valid until the next failing call on this thread. */
DT_API const char *dt_last_error(void);

/* Clears the calling thread's error message. */
DT_API void dt_clear_error(void);

/* Allocator hooks. alloc returns memory aligned to at least `alignment` bytes (a power of
 * two, at most 4096) or NULL; free releases it (ptr may be NULL). Used for every tensor
 * storage and internal structure. Set before creating any object; objects must be freed by
 * the allocator that created them. Passing NULL restores the default (aligned malloc). */
typedef struct dt_allocator {
  void *(*alloc)(size_t size, size_t alignment, void *user);
  void (*free)(void *ptr, void *user);
  void *user;
} dt_allocator;

/* Installs allocator for the whole process (the struct is copied; allocator->user is kept and
 * passed back to both hooks, so it must outlive every object allocated through it). NULL, or a
 * struct whose alloc or free is NULL, restores the default. Not thread-safe: call it before
 * creating any object and before starting rank threads. No errors (nothing to return). */
DT_API void dt_set_allocator(const dt_allocator *allocator);

/* Frees a buffer the library allocated and handed to the caller (dt_graph_to_string's
 * text, dt_comm_all_gather_object's dt_objects, ...), with the allocator that made it.
 * NULL is a no-op. Handles have their own _destroy or _release instead. */
DT_API void dt_free(void *ptr);

/* Log levels and callback. The library never prints on its own: messages go to the
 * callback, if one is set, and are dropped otherwise. */
typedef enum dt_log_level {
  DT_LOG_DEBUG = 0,
  DT_LOG_INFO = 1,
  DT_LOG_WARN = 2,
  DT_LOG_ERROR = 3,
} dt_log_level;

typedef void (*dt_log_fn)(dt_log_level level, const char *message, void *user);

/* Installs a log callback (NULL to remove it) and the lowest level that reaches it (without
 * one, messages are dropped). Warnings include environment variables with unusable values
 * (each reported once per value) and dt_comm_spawn's report of meshes and groups a rank
 * function left undestroyed. */
DT_API void dt_set_log_callback(dt_log_fn fn, void *user, dt_log_level min_level);

/* The library's version as "MAJOR.MINOR.PATCH". */
DT_API const char *dt_version_string(void);

/* Sets how many threads one rank's kernels may use, as PyTorch's torch.set_num_threads: the
 * library's own large kernels (float32 elementwise loops, gelu's backward, softmax and
 * log_softmax and their backwards, layer_norm and rms_norm and their backwards (input, weight and
 * bias gradients), cross_entropy's rows, the Adam/AdamW update) split their rows over an
 * intra-op thread pool, and the BLAS's GEMMs get the same count. n >= 1, or 0 for the default:
 * the environment's DT_NUM_THREADS when set (read once, at the process's first call that asks),
 * else the machine's online cores for the kernels and the BLAS's own count
 * (OPENBLAS_NUM_THREADS, else its default) for the GEMMs. A DT_NUM_THREADS that is not a whole
 * integer in 1..4096 ("abc", "0", "4x") is reported once through the log callback (DT_LOG_WARN,
 * naming the variable and value) and ignored.
 *
 * Whatever the setting, a call never uses more than cores / (rank threads of the process)
 * threads, at least 1: dt_comm_spawn's N rank threads on C cores get C / N each (so n above
 * the cores is the cores), and the ranks never oversubscribe the cores. Results do not
 * depend on the count: every split kernel computes each row (or element) alone, so 1 and N
 * threads give the same bits. Idle pool threads block on a condition variable (none spins);
 * they start at the first kernel that needs them and are joined when the process exits. A
 * custom allocator (dt_set_allocator) is called from pool threads too.
 * Process-wide; safe to call from any thread; takes effect at the next kernel call.
 * Errors: DT_ERR_INVALID (n < 0). */
DT_API dt_status dt_set_num_threads(int n);

/* The number of threads a kernel called now on this thread would use: the setting (or its
 * default) after the cap at cores / rank threads described above; at least 1. */
DT_API int dt_get_num_threads(void);

/* Float32 matrix products (matmul, linear, addmm and their gradients, on the CPU) on Intel
 * AMX tiles, on CPUs that have AMX-BF16 (Sapphire Rapids and later) under an OS that grants
 * the tile state (Linux 5.16+): each operand is split into three bfloat16 parts and six part
 * products are summed in float32, as accurate as sgemm and faster (docs/design.md, "Float32
 * GEMMs on AMX tiles"); results differ from the BLAS's in the last bits, denormal values
 * (below 2^-126) count as zero and values below about 2^-110 keep fewer bits (their parts
 * under 2^-126 are flushed). On by default where available; the environment's DT_AMX=0
 * (read once) turns it off by default, and dt_set_cpu_amx(enabled) overrides both (false:
 * every product on the BLAS, e.g. for the same bits as a machine without AMX). While off, the
 * process never asks the OS for the tile state. Process-wide; safe from any thread; takes
 * effect at the next product. Always DT_OK (a build or CPU without AMX ignores it). */
DT_API dt_status dt_set_cpu_amx(bool enabled);

/* Whether a float32 product called now would run on AMX tiles: the setting above and this
 * CPU and OS (the first call may ask the OS for the tile state). */
DT_API bool dt_get_cpu_amx(void);

#ifdef __cplusplus
}
#endif

#endif /* DTENSOR_CORE_H */
