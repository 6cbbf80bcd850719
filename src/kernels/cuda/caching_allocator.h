/*
 * The caching allocator's bookkeeping, in plain C over a backing allocator (cudaMalloc and
 * cudaFree on a GPU, malloc and free in tests/test_cuda_allocator.c), with PyTorch's
 * CUDACachingAllocator as the semantic reference:
 *
 *  - Sizes round up to 512 B. Requests up to 1 MiB are small: they are carved from 2 MiB
 *    segments. Larger ones are carved from 20 MiB segments below 10 MiB, and from a segment of
 *    their own size rounded up to 2 MiB above.
 *  - A free block is found by best fit among the free blocks of the same pool and stream; the
 *    rest of a block is split off when it is worth keeping (512 B in the small pool, more than
 *    1 MiB in the large one), so a big segment serves many requests.
 *  - Blocks belong to the stream they were allocated on, and are reused only on it: work on
 *    one stream runs in order, so a block freed by the host while a kernel still reads it is
 *    handed to a kernel queued after that one. A block freed from another stream makes its
 *    own stream wait for the freeing stream's work first (backing.stream_wait).
 *  - A freed block merges with free neighbours of its segment. Segments go back to the
 *    backing allocator only when wholly free, on empty_cache or when the backing allocator
 *    fails (then the allocation is tried once more).
 *
 * Thread-safe: one lock per allocator (one allocator per device).
 */
#ifndef DT_KERNELS_CUDA_CACHING_ALLOCATOR_H
#define DT_KERNELS_CUDA_CACHING_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtensor/cuda.h"

#define DT__ALLOC_ROUND ((size_t)512)
#define DT__ALLOC_SMALL_MAX ((size_t)1 << 20)
#define DT__ALLOC_SMALL_SEGMENT ((size_t)2 << 20)
#define DT__ALLOC_LARGE_SEGMENT ((size_t)20 << 20)
#define DT__ALLOC_LARGE_MIN_OWN ((size_t)10 << 20)
#define DT__ALLOC_LARGE_ROUND ((size_t)2 << 20)

/* Where segments come from. */
typedef struct dt_block_backing {
  void *context;
  /* nbytes of new memory, or NULL when there is none. */
  void *(*alloc)(void *context, size_t nbytes);
  void (*free)(void *context, void *ptr);
  /* Optional: later work on stream `owner` waits for the work queued so far on `freer`. */
  void (*stream_wait)(void *context, uintptr_t owner, uintptr_t freer);
} dt_block_backing;

typedef struct dt_caching_allocator dt_caching_allocator;

/* A new allocator over backing (copied); NULL when the host is out of memory. */
dt_caching_allocator *dt__caching_allocator_create(const dt_block_backing *backing);

/* Gives every segment back and frees the allocator. Returns how many blocks were still
 * allocated (their memory is gone: a leak the caller reports). */
size_t dt__caching_allocator_destroy(dt_caching_allocator *a);

/* nbytes (> 0) for work on `stream`; NULL when the backing allocator has none even after
 * the cache was emptied (nbytes too large to round: NULL as well). */
void *dt__caching_allocator_alloc(dt_caching_allocator *a, size_t nbytes, uintptr_t stream);

/* Gives back a block of this allocator, freed by a thread whose stream is `stream`. False
 * (and nothing done) when ptr is not an allocated block of it. */
bool dt__caching_allocator_free(dt_caching_allocator *a, void *ptr, uintptr_t stream);

/* Gives every wholly free segment back to the backing allocator; returns how many. */
size_t dt__caching_allocator_empty_cache(dt_caching_allocator *a);

void dt__caching_allocator_stats(dt_caching_allocator *a, dt_cuda_allocator_stats *out);
void dt__caching_allocator_reset_peak(dt_caching_allocator *a);

/* The size of the allocated block at ptr (0 when ptr is none): the rounded size, or more
 * when the rest of a block was too small to split off. */
size_t dt__caching_allocator_block_size(dt_caching_allocator *a, const void *ptr);

#endif /* DT_KERNELS_CUDA_CACHING_ALLOCATOR_H */
