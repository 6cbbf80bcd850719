/* Fake backend: one process impersonating rank r of a world of W (W up to
 * DT_COMM_MAX_WORLD). Every collective has already been validated by the public wrapper
 * (shapes, dtypes, roots as for a real group of W) and completes at once without moving
 * data: output tensors are left exactly as they were. It exists to simulate large worlds and
 * to measure dispatch cost, so the call path allocates nothing and takes no lock. */
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "comm/comm_impl.h"

static dt_status fake_start(dt_comm *comm, dt_work *work) {
  (void)comm;
  work->done = true;
  work->status = DT_OK;
  return DT_OK;
}

static dt_status fake_wait(dt_comm *comm, dt_work *work) {
  (void)comm;
  (void)work;
  return DT_OK;
}

/* Without peers to ask, the new group is what the caller says it is (the mesh knows), or
 * else the group every rank would get if all passed the caller's color: comm itself. */
static dt_status fake_split(dt_comm *comm, int color, int key, const dt_split_hint *hint,
                            dt_comm **out) {
  (void)key;
  comm->seq++;
  if (color < 0) return DT_OK;
  int size = comm->size, rank = comm->rank;
  if (hint && hint->size > 0) {
    size = hint->size;
    rank = hint->rank;
  }
  *out = dt__comm_new(&dt__fake_backend, rank, size, 0, NULL);
  if (!*out) return dt__error(DT_ERR_NOMEM, "dt_comm_split: out of memory");
  return DT_OK;
}

static void fake_destroy(dt_comm *comm) { (void)comm; }

static void fake_abort(dt_comm *comm, const char *reason) {
  (void)comm;
  (void)reason;
}

/* Every simulated rank is assumed to contribute the same bytes as this one. */
static dt_status fake_all_gather_object(dt_comm *comm, const void *data, size_t nbytes,
                                        dt_objects **out) {
  comm->seq += 2;
  dt_objects *objects = dt__objects_alloc(comm->size, nbytes * (size_t)comm->size);
  if (!objects) {
    return dt__error(DT_ERR_NOMEM,
                     "dt_comm_all_gather_object: out of memory for %d copies of %zu bytes",
                     comm->size, nbytes);
  }
  size_t *lengths = (size_t *)objects->lengths, *offsets = (size_t *)objects->offsets;
  unsigned char *bytes = (unsigned char *)objects->data;
  for (int r = 0; r < comm->size; r++) {
    lengths[r] = nbytes;
    offsets[r] = nbytes * (size_t)r;
    if (nbytes) memcpy(bytes + offsets[r], data, nbytes);
  }
  *out = objects;
  return DT_OK;
}

const dt_comm_backend dt__fake_backend = {
    .name = "fake",
    .supports = DT_COLL_ALL,
    /* It moves no memory at all, so CUDA tensors are as good as CPU ones (PyTorch's fake
     * process group takes "cuda" meshes too: seed 001). Kinds registered at run time are
     * refused (their tests check the refusal). */
    .devices = 1u << DT_DEVICE_CUDA,
    .start = fake_start,
    .wait = fake_wait,
    .test = NULL,
    .split = fake_split,
    .destroy = fake_destroy,
    .abort = fake_abort,
    .all_gather_object = fake_all_gather_object,
};

/* The fake world: rank and size from the options, or from DT_FAKE_RANK / DT_FAKE_WORLD when
 * the options leave world_size 0. */
dt_status dt__fake_init(const dt_comm_options *opts, dt_comm **out) {
  int rank = opts->rank, world_size = opts->world_size;
  if (world_size == 0) {
    /* A public init reading the environment refuses a bad value rather than guess. */
    const char *w = getenv("DT_FAKE_WORLD"), *r = getenv("DT_FAKE_RANK");
    int64_t value = 1;
    if (w && *w && !dt__env_int_parse(w, 1, DT_COMM_MAX_WORLD, &value)) {
      return dt__error(DT_ERR_INVALID,
                       "dt_comm_init: DT_FAKE_WORLD is \"%.64s\", expected an integer 1..%d", w,
                       DT_COMM_MAX_WORLD);
    }
    world_size = (int)value;
    value = opts->rank;
    if (r && *r && !dt__env_int_parse(r, 0, world_size - 1, &value)) {
      return dt__error(DT_ERR_INVALID,
                       "dt_comm_init: DT_FAKE_RANK is \"%.64s\", expected an integer 0..%d (the "
                       "fake world has %d ranks)",
                       r, world_size - 1, world_size);
    }
    rank = (int)value;
  }
  if (world_size < 1 || world_size > DT_COMM_MAX_WORLD) {
    return dt__error(DT_ERR_INVALID, "dt_comm_init: fake world_size is %d, expected 1..%d",
                     world_size, DT_COMM_MAX_WORLD);
  }
  if (rank < 0 || rank >= world_size) {
    return dt__error(DT_ERR_INVALID, "dt_comm_init: fake rank %d is outside a world of %d", rank,
                     world_size);
  }
  *out = dt__comm_new(&dt__fake_backend, rank, world_size, 0, NULL);
  if (!*out) return dt__error(DT_ERR_NOMEM, "dt_comm_init: out of memory");
  return DT_OK;
}
