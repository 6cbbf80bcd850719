/* The lowest part of comm: group handles, work completion and all_gather_object results, which
 * the public wrappers (comm.c, collectives.c) and every backend use. It calls no backend and
 * nothing above it, so backends call down into it while comm.c and registry.c call down into
 * the backends. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"

const char *dt_reduce_op_name(dt_reduce_op op) {
  switch (op) {
  case DT_REDUCE_SUM: return "sum";
  case DT_REDUCE_AVG: return "avg";
  case DT_REDUCE_MAX: return "max";
  case DT_REDUCE_MIN: return "min";
  case DT_REDUCE_PROD: return "prod";
  }
  return "invalid";
}

uint64_t dt__comm_next_id(void) {
  static atomic_uint_fast64_t next_id = 1;
  return (uint64_t)atomic_fetch_add(&next_id, 1);
}

dt_comm *dt__comm_new(const dt_comm_backend *backend, int rank, int size, uint64_t id,
                      void *state) {
  dt_comm *comm = dt__calloc(sizeof *comm);
  if (!comm) return NULL;
  comm->backend = backend;
  comm->rank = rank;
  comm->size = size;
  comm->id = id ? id : dt__comm_next_id();
  comm->timeout_ms = dt__env_int("DT_COMM_TIMEOUT_MS", 1, INT64_MAX, DT_COMM_DEFAULT_TIMEOUT_MS,
                                 "the default (10 minutes)");
  const char *debug = getenv("DT_DEBUG_COLLECTIVES");
  comm->debug = debug && strcmp(debug, "0") != 0 && *debug;
  snprintf(comm->name, sizeof comm->name, "world");
  comm->state = state;
  atomic_init(&comm->handle_refs, 1);
  return comm;
}

dt_comm *dt__comm_retain(dt_comm *comm) {
  if (comm) atomic_fetch_add(&comm->handle_refs, 1);
  return comm;
}

void dt__comm_free(dt_comm *comm) {
  if (!comm || atomic_fetch_sub(&comm->handle_refs, 1) != 1) return;
  while (comm->free_works) {
    dt_work *next = comm->free_works->next_free;
    dt__free(comm->free_works);
    comm->free_works = next;
  }
  dt__free(comm);
}

/* ---- Work handles and results ------------------------------------------------------------ */

void dt__work_finish(dt_work *work, dt_status status) {
  work->done = true;
  work->status = status;
  if (status != DT_OK) snprintf(work->message, sizeof work->message, "%s", dt_last_error());
}

/* One allocation: the header, lengths, offsets, then the bytes. */
dt_objects *dt__objects_alloc(int count, size_t total) {
  size_t header = sizeof(dt_objects) + 2 * sizeof(size_t) * (size_t)count;
  dt_objects *objects = dt__alloc(header + total + 1);
  if (!objects) return NULL;
  size_t *lengths = (size_t *)(objects + 1);
  objects->count = count;
  objects->lengths = lengths;
  objects->offsets = lengths + count;
  objects->data = (unsigned char *)objects + header;
  return objects;
}
