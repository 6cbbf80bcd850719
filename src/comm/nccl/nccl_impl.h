/* The NCCL backend's private interface (a build with CUDA and NCCL: DT_HAVE_NCCL).
 *
 * Files, bottom to top: nccl_plan.c (which GPU each rank takes, decided identically on every
 * rank from what every rank said: plain C, tested on the CPU), nccl_backend.c (groups,
 * collectives on a communication stream, polling with a deadline, aborts, all_gather_object),
 * nccl_create.c (making a world over a bootstrap group, dt_comm_init's "nccl"). */
#ifndef DT_COMM_NCCL_IMPL_H
#define DT_COMM_NCCL_IMPL_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* nccl.h's own declarations are not strict prototypes (ncclGroupStart()). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "comm/comm_impl.h"

#define NC_MAX_DEVICES 16
#define NC_BUS_ID 20 /* "0000:00:00.0" and its terminator, with room */
#define NC_HOST 64
#define NC_REASON 192
#define NC_BOOT 40 /* a boot id: 36 characters and its terminator, with room */

/* What one rank tells the others before the NCCL group exists (exchanged as bytes with
 * dt_comm_all_gather_object over the bootstrap group). */
typedef struct nc_hello {
  char host[NC_HOST];
  char boot[NC_BOOT]; /* the kernel's boot id: containers of two machines may share a host name */
  int32_t count;      /* CUDA devices this process sees (0: none; reason says why) */
  int32_t requested;  /* the device asked for, or -1: the rank's index among its host's ranks */
  int32_t id_ok;      /* rank 0 only: 1 when `id` holds a fresh ncclUniqueId */
  int64_t pid;        /* ranks of one process (threads under dt_comm_spawn) share an abort */
  uint64_t world;     /* rank 0 only: its nc_world, adopted by the ranks of its process */
  char reason[NC_REASON];
  char bus[NC_MAX_DEVICES][NC_BUS_ID]; /* PCI bus id of each device this process sees */
  ncclUniqueId id;                     /* rank 0's */
} nc_hello;

/* Decides every rank's device from the n hellos: the requested one, or the rank's index
 * among the ranks of its host (in rank order). Writes devices[n] and returns DT_OK, or
 * returns DT_ERR_UNSUPPORTED / DT_ERR_INVALID with `message` naming the rank and why: no
 * device, a device index past the count, two ranks on one GPU (same host and PCI bus id: NCCL
 * refuses them), or rank 0 without a unique id. Every rank computes the same verdict. */
dt_status dt__nccl_plan(const nc_hello *hellos, int n, int *devices, char *message, size_t size);

/* Fills h->host (gethostname, or "unknown") and h->boot (the kernel's boot id, empty where
 * /proc/sys/kernel/random/boot_id cannot be read). Two hellos are of one host when both match:
 * a host name alone is shared by containers on different machines ("localhost"). */
void dt__nc_host_of(nc_hello *h);
/* Whether two hellos come from one host (the same host name and boot id). */
bool dt__nc_same_host(const nc_hello *a, const nc_hello *b);

/* ---- nccl_backend.c: groups and collectives ------------------------------------------- */

/* The abort state every group of one world shares in this process. */
typedef struct nc_world {
  atomic_int refcount;
  atomic_int aborted;
  pthread_mutex_t lock;
  char reason[512];
} nc_world;

/* One rank's group (dt_comm->state). */
typedef struct nc_comm {
  ncclComm_t comm;
  int device;
  cudaStream_t stream; /* the communication stream */
  nc_world *world;
  dt_comm *watch;     /* the bootstrap group whose abort this world follows (threads), or NULL */
  dt_comm *bootstrap; /* owned (dt_comm_init's MPI world), or NULL */
  bool comm_aborted;  /* ncclCommAbort was called: the communicator is gone */
  int32_t *scratch;   /* one int of device memory: barrier */
  cudaEvent_t events[8];
  int n_events;
} nc_comm;

extern const dt_comm_backend dt__nccl_backend;

/* A world with `refs` references; NULL when out of memory. */
nc_world *dt__nc_world_new(int refs);
/* Drops `refs` references (NULL allowed); the last frees it. */
void dt__nc_world_release(nc_world *w, int refs);
/* The non-blocking configuration every communicator is made with. */
ncclConfig_t dt__nc_config(void);
int64_t dt__nc_now_ns(void);
/* A rank's group around a ready communicator (taken over), following `watch`'s abort when
 * not NULL; NULL on failure (status in *status, the communicator aborted, world untouched). */
dt_comm *dt__nc_wrap(ncclComm_t c, int device, nc_world *world, dt_comm *watch, dt_status *status);
/* dt_comm_destroy's work on a group this backend owns (comm.c is above the backends). */
void dt__nc_destroy_group(dt_comm *comm);

#endif /* DT_COMM_NCCL_IMPL_H */
