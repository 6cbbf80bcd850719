/* Context parallelism's private interface: where each rank's positions of a sequence lie
 * (context_parallel.c), shared with ring attention (ring_attention.c). */
#ifndef DT_PARALLEL_CONTEXT_PARALLEL_IMPL_H
#define DT_PARALLEL_CONTEXT_PARALLEL_IMPL_H

#include "dtensor/parallel.h"

/* One rank's runs of global positions, in its local order: n (1 or 2) runs of length[i]
 * positions from start[i] (a run may be empty); offset[i] is where run i begins locally. */
typedef struct dt__cp_segments {
  int n;
  int64_t start[2], length[2], offset[2];
  int64_t total; /* the rank's local length */
} dt__cp_segments;

/* The segments of rank `rank` of `size` for a sequence of seq_len positions (arguments
 * already checked). */
void dt__cp_segments_of(int64_t seq_len, int size, int rank, dt_cp_layout layout,
                        dt__cp_segments *out);

/* Whether layout is one of dt_cp_layout's values. */
static inline bool dt__cp_layout_valid(dt_cp_layout layout) {
  return layout == DT_CP_LAYOUT_HEAD_TAIL || layout == DT_CP_LAYOUT_CONTIGUOUS;
}

static inline const char *dt__cp_layout_name(dt_cp_layout layout) {
  return layout == DT_CP_LAYOUT_HEAD_TAIL ? "head-tail" : "contiguous";
}

#endif /* DT_PARALLEL_CONTEXT_PARALLEL_IMPL_H */
