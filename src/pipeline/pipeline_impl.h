/* Private parts of the pipeline layer (src/pipeline/): the schedule's representation, shared
 * by schedule.c (making and validating schedules) and pipeline.c (running them). */
#ifndef DT_PIPELINE_IMPL_H
#define DT_PIPELINE_IMPL_H

#include "dtensor/dist.h"
#include "dtensor/pipeline.h"

/* Returns a failed status at once. */
#define PP_CHECK(call)                                                                             \
  do {                                                                                             \
    dt_status pp_status_ = (call);                                                                 \
    if (pp_status_ != DT_OK) return pp_status_;                                                    \
  } while (0)

struct dt_pp_schedule {
  int n_ranks, n_stages, n_microbatches;
  int *counts;            /* [n_ranks] */
  dt_pp_action **actions; /* [n_ranks][counts[r]] */
};

/* A copy of schedule in *out (the caller frees it with dt_pp_schedule_destroy). */
dt_status dt__pp_schedule_copy(const dt_pp_schedule *schedule, dt_pp_schedule **out);

/* The pp rank that holds stage (the loop placement). */
static inline int dt__pp_stage_rank(const dt_pp_schedule *s, int stage) {
  return stage % s->n_ranks;
}

/* ---- Transfers between pp ranks (transfer.c) ------------------------------------------------ */

/* The most dims of a tensor that crosses stages. */
#define DT_PP_MAX_DIMS 8

/* What precedes every activation or gradient on the wire: what it is and its layout. */
typedef struct dt__pp_header {
  int kind; /* DT_PP_SEND_ACTIVATION or DT_PP_SEND_GRAD */
  int stage, microbatch;
  dt_dtype dtype;
  int ndim;
  int64_t local_shape[DT_PP_MAX_DIMS];
  int64_t global_shape[DT_PP_MAX_DIMS];
  int n_placements; /* 0: a local tensor */
  dt_placement placements[DT_MESH_MAX_DIMS];
} dt__pp_header;

/* Receive buffers, reused: a buffer is busy from its receive until released. */
typedef struct dt__pp_pool {
  struct pp_buffer {
    dt_tensor *t;
    bool busy;
  } * items;
  int n, cap;
  int64_t allocated; /* buffers ever allocated */
} dt__pp_pool;

/* One outstanding send (header and payload). */
typedef struct dt__pp_pending {
  dt_work *works[2];
  dt_tensor *tensors[2]; /* the header (from the pool) and the payload (a reference) */
} dt__pp_pending;

/* The point-to-point state of one rank in its pp group. */
typedef struct dt__pp_link {
  dt_comm *comm; /* borrowed: flush and free never touch it (the group may be gone by then) */
  int size;      /* the group's size */
  dt__pp_pool pool;
  dt__pp_pending *pending; /* [size][DT_PP_SEND_WINDOW] rings */
  int *first, *count;      /* [size]: ring start and length per peer */
  int64_t bytes_sent;
} dt__pp_link;

dt_status dt__pp_link_init(dt__pp_link *link, dt_comm *comm);
/* Waits for every outstanding send. */
dt_status dt__pp_link_flush(dt__pp_link *link);
/* Frees the link (after a flush, or abandoning unfinished sends after an error). */
void dt__pp_link_free(dt__pp_link *link);
/* Sends header then payload (this rank's contiguous local block) to peer, asynchronously; waits
 * for the oldest transfer to peer first when DT_PP_SEND_WINDOW are outstanding. */
dt_status dt__pp_send(dt__pp_link *link, int peer, const dt__pp_header *h, dt_tensor *payload);
/* Receives a header, checks it announces `expect` (kind, stage, microbatch), then receives the
 * payload into a pool buffer (borrowed in *buf, busy until dt__pp_buffer_release). */
dt_status dt__pp_recv(dt__pp_link *link, int peer, const dt__pp_header *expect, dt__pp_header *h,
                      dt_tensor **buf);
void dt__pp_buffer_release(dt__pp_link *link, dt_tensor *buf);

#endif /* DT_PIPELINE_IMPL_H */
