/* Reference counts shared between threads: the one pair of memory orders every refcounted
 * object of the library (meshes, specs, safetensors maps) uses. */
#ifndef DT_CORE_REFCOUNT_H
#define DT_CORE_REFCOUNT_H

#include <stdatomic.h>
#include <stdbool.h>

/* Takes one more reference. Relaxed: whoever passes a reference on already holds one, so the
 * object cannot die meanwhile. */
static inline void dt__ref_take(atomic_int *count) {
  atomic_fetch_add_explicit(count, 1, memory_order_relaxed);
}

/* Drops one reference; true when it was the last, and the caller frees the object.
 * Acquire-release: the thread that frees sees every write made through the other
 * references. */
static inline bool dt__ref_drop(atomic_int *count) {
  return atomic_fetch_sub_explicit(count, 1, memory_order_acq_rel) == 1;
}

#endif
