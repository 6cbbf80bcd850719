/*
 * The device layer's private interface: how the tensor layer allocates, frees and copies the
 * memory of each device kind, and the checks host code makes before it reads element memory.
 *
 * A device kind registers one dt_device_memory (its allocator and copies); its kernels are
 * registered separately, per op, by src/kernels/<device>/ (kernels/kernel_table.h). The CPU's
 * memory is the library's own allocator (core/alloc.c): a CPU tensor stays one allocation.
 */
#ifndef DT_TENSOR_DEVICE_IMPL_H
#define DT_TENSOR_DEVICE_IMPL_H

#include "tensor/tensor_impl.h"

/* Device kinds: the public ones (DT_DEVICE_CPU, DT_DEVICE_CUDA), then slots for kinds that
 * register at run time (tests register a host-memory "mirror" device in one, so that the
 * device plumbing is exercised without a GPU). */
#define DT__DEVICE_KINDS 4
#define DT__DEVICE_RUNTIME_KIND 2 /* the first run-time slot */

/* A storage's device as one integer (tensor_impl.h's dt_storage.device): kind | index << 8.
 * The CPU is 0, so the hot path compares devices with one integer compare. */
static inline uint32_t dt__device_key(dt_device d) {
  return (uint32_t)d.kind | (uint32_t)d.index << 8;
}
static inline dt_device dt__device_of_key(uint32_t key) {
  return (dt_device){(dt_device_kind)(key & 0xffu), (int)(key >> 8)};
}
static inline uint32_t dt__tensor_device_key(const dt_tensor *t) { return t->storage->device; }

/* What a device kind provides to the tensor layer. Copies never overlap. A copy to the host
 * returns when the bytes have arrived; a copy from the host returns when the source may be
 * reused; every copy is ordered before the calling thread's later work on the devices it
 * touches (a GPU kind queues device work on the thread's stream and need not wait for it). */
typedef struct dt_device_memory {
  const char *name;     /* "cpu", "cuda", ... */
  bool host_accessible; /* host code may dereference its memory */
  int (*count)(void);   /* devices of this kind present in this process */
  /* Optional: why count() is 0, for error messages ("no CUDA device (...)"). */
  const char *(*absent)(void);
  /* nbytes (> 0) of device memory on device `index`; NULL when out of memory. */
  void *(*alloc)(int index, size_t nbytes);
  void (*free)(int index, void *ptr);
  dt_status (*to_host)(int index, void *host, const void *device, size_t nbytes);
  dt_status (*from_host)(int index, void *device, const void *host, size_t nbytes);
  /* Between two devices of this kind (the same one or not). */
  dt_status (*within)(int dst_index, void *dst, int src_index, const void *src, size_t nbytes);
} dt_device_memory;

/* The registered memory of a kind (NULL: none). */
const dt_device_memory *dt__device_memory(int kind);

/* Registers the memory of a kind that is not the CPU (a CUDA build at start-up; tests, a
 * run-time kind). Not thread-safe: register before any tensor of the kind exists. NULL
 * unregisters (every tensor of the kind must be gone). DT_ERR_INVALID for the CPU or a kind
 * outside the table. */
dt_status dt__device_register_memory(int kind, const dt_device_memory *memory);

/* DT_OK when `device` can hold tensors (a registered kind, an index below its count);
 * otherwise DT_ERR_UNSUPPORTED naming `op` and the device, and for CUDA, how to build it. */
dt_status dt__device_check_available(const char *op, dt_device device);

/* The one copy between devices: nbytes from src on src_device to dst on dst_device. Host to
 * device, device to host and within one kind go through that kind's functions; between two
 * kinds the bytes are staged through host memory. */
dt_status dt__device_copy(dt_device dst_device, void *dst, dt_device src_device, const void *src,
                          size_t nbytes);

/* A new contiguous, uninitialised tensor on `device` (dt__tensor_new for the CPU). The device
 * must be available. */
dt_status dt__tensor_new_on(dt_device device, int ndim, const int64_t *shape, dt_dtype dtype,
                            dt_tensor **out);

/* dt_wrap_ex for memory of `device` owned elsewhere (a DLPack producer's): the tensor reads
 * and writes it on that device and never frees it; release(user) runs after the last
 * reference. Errors: the device's unavailability (DT_ERR_UNSUPPORTED naming op and the
 * device), those of dt_wrap_ex. On an error release is not called. */
dt_status dt__wrap_on(const char *op, dt_device device, void *data, size_t nbytes, int ndim,
                      const int64_t *shape, const int64_t *strides, dt_dtype dtype,
                      void (*release)(void *user), void *user, dt_tensor **out);

/* The device of a key, written "cpu" or "cuda:0" into buf. */
const char *dt__device_key_format(uint32_t key, char *buf, size_t size);

/* DT_OK when host code may read t's element memory; otherwise DT_ERR_UNSUPPORTED naming `op`
 * and t's device and saying to copy it to the CPU first (dt_to_device). */
dt_status dt__check_host_readable(const char *op, const dt_tensor *t);

#endif /* DT_TENSOR_DEVICE_IMPL_H */
