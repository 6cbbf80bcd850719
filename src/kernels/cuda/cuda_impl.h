/*
 * The CUDA device's private interface (a CUDA build only): devices and their count, the
 * calling thread's current stream per device, CUDA errors as dt_status, the TF32 setting.
 * C only, on the CUDA runtime's C API (tensor_impl.h's C11 atomics are not C++): .cu files get
 * plain arguments from the C files that include this.
 */
#ifndef DT_KERNELS_CUDA_IMPL_H
#define DT_KERNELS_CUDA_IMPL_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "core/thread_key.h"
#include "dtensor/cuda.h"
#include "tensor/device_impl.h"

/* Devices beyond this many are not used (the count is clamped). */
#define DT__CUDA_MAX_DEVICES 16

/* The devices present, counted once per process (0 without a GPU or a driver). */
int dt__cuda_count(void);

/* Why dt__cuda_count is 0: "no CUDA device (...the runtime's reason...)"; "" when it is not. */
const char *dt__cuda_absent_reason(void);

/* DT_OK when index names a present device; otherwise DT_ERR_UNSUPPORTED (no device) or
 * DT_ERR_INVALID (a bad index) naming `op`. */
dt_status dt__cuda_check_device(const char *op, int index);

/* Makes device index (present: the caller checked) the calling thread's current device. */
dt_status dt__cuda_use_device(const char *op, int index);

/* The calling thread's current stream on device index, made the current device. The
 * thread takes a stream from the device's pool on first use and returns it at exit, so
 * streams live as long as the process (the caching allocator keys free blocks by stream). */
dt_status dt__cuda_stream(const char *op, int index, cudaStream_t *out);

/* nbytes of device index's memory from its caching allocator, keyed by the calling thread's
 * stream (NULL: out of memory, or no such device); freed with dt__cuda_device_free on the same
 * thread, once no other stream uses it (the caller synchronises those). No cudaFree on the
 * way: freeing synchronises the device, which stalls other ranks' NCCL kernels. */
void *dt__cuda_device_alloc(int index, size_t nbytes);
void dt__cuda_device_free(int index, void *ptr);

/* Objects each thread keeps per device (its streams, cuBLAS handles, staging buffers): a table
 * of DT__CUDA_MAX_DEVICES zeroed slots of slot_size bytes, slot d for device d, made on the
 * thread's first use. When the thread exits, release(d, slot) runs on every slot, used or
 * still zero, and the table is freed. One static table per kind of object, initialised with
 * DT_CUDA_THREAD_TABLE_INIT. */
typedef struct dt_cuda_thread_table {
  size_t slot_size;
  void (*release)(int device, void *slot);
  dt_thread_key key;
} dt_cuda_thread_table;

/* One thread's objects of a table: the table, then the slots (aligned for any slot type). */
typedef struct dt_cuda_thread_objects {
  const dt_cuda_thread_table *table;
  void **owner; /* the thread's _Thread_local pointer to the slots */
  max_align_t slots[];
} dt_cuda_thread_objects;

/* The key's destructor: resets the thread's pointer first (as tensor.c's pool does), so that
 * a later destructor of the same thread (a tensor freed at exit) makes a fresh table instead
 * of reading the freed one; then releases every slot and frees the table. */
static inline void dt__cuda_thread_table_free(void *object) {
  dt_cuda_thread_objects *t = object;
  *t->owner = NULL;
  for (int d = 0; d < DT__CUDA_MAX_DEVICES; d++)
    t->table->release(d, (char *)t->slots + (size_t)d * t->table->slot_size);
  free(t);
}

#define DT_CUDA_THREAD_TABLE_INIT(slot_type, release_fn)                                           \
  {                                                                                                \
    .slot_size = sizeof(slot_type), .release = (release_fn),                                       \
    .key = DT_THREAD_KEY_INIT(dt__cuda_thread_table_free)                                          \
  }

/* Makes the calling thread's slots of table, stores them in *owner (the caller's own
 * _Thread_local pointer, reset to NULL when the thread's table is freed) and returns them, or
 * NULL when memory cannot be had. */
static inline void *dt__cuda_thread_slots(dt_cuda_thread_table *table, void **owner) {
  dt_cuda_thread_objects *t = calloc(1, sizeof *t + DT__CUDA_MAX_DEVICES * table->slot_size);
  if (!t) return NULL;
  t->table = table;
  t->owner = owner;
  *owner = t->slots;
  dt__thread_key_set(&table->key, t);
  return t->slots;
}

/* A failed CUDA call as a dt_status with "op: what: cudaErrorName: description": DT_ERR_NOMEM
 * for cudaErrorMemoryAllocation, DT_ERR_UNSUPPORTED for no device or driver, otherwise
 * DT_ERR_INTERNAL. Clears the runtime's last (non-sticky) error. */
dt_status dt__cuda_error(const char *op, const char *what, cudaError_t error);

/* A failed call of the CUDA runtime or a CUDA library (cuBLAS) as a dt_status with "op: what:
 * name: description" (the library's name and text for its code): DT_ERR_NOMEM when the code
 * says out_of_memory, DT_ERR_UNSUPPORTED when it says unsupported (no device or driver, an
 * operation this GPU lacks), otherwise DT_ERR_INTERNAL. */
dt_status dt__cuda_failure(const char *op, const char *what, bool out_of_memory, bool unsupported,
                           const char *name, const char *description);

/* Whether f32 GEMMs may use TF32 (dt_cuda_set_allow_tf32). */
bool dt__cuda_allow_tf32(void);

/* Registers the CUDA kind's profiler timer (cuda_profile.c: GPU work timed with CUDA events on
 * per-stream tracks); cuda_table.c calls it at start-up. */
void dt__cuda_profile_register(void);

/* The CUDA kind's memory (cuda_memory.c), registered by cuda_table.c at start-up. */
extern const dt_device_memory dt__cuda_memory;

/* The CUDA kind's fused routines for the optimizers (cuda_routines.c, kernels/device_routines.h),
 * registered by cuda_table.c at start-up. */
extern const struct dt_device_routines dt__cuda_routines;

#endif /* DT_KERNELS_CUDA_IMPL_H */
