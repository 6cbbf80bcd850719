/* Threads backend: ranks are threads of one process and share their buffers.
 *
 * Shape of the shared state:
 *   domain   one per dt_comm_spawn world: abort flag and reason, the list of its groups (to wake
 *            them all on abort), which ranks have returned, the first failure.
 *   group    one per process group (the world and every split), shared by its members:
 *            a ring of TH_SLOTS collective slots, lazily made point-to-point channels, and
 *            the mutex/condvar its waiters block on.
 *   ring     TH_SLOTS slots used round-robin by sequence number, each serving `nparties`
 *            parties (the group's ranks, or the two ends of a channel).
 *   slot     one collective in flight: what each party posted (buffers, counts), then a list
 *            of tasks (piece x chunk) that ANY waiting party may claim and run. Reading the
 *            peers' buffers directly is the zero copy; claiming by atomic counter means a
 *            rank that started a collective asynchronously and went on with other work does
 *            not hold up the others: they do its share.
 *
 * Lifecycle of a slot for sequence number s: parties post (arrived++); the last to arrive
 * checks that the calls agree and publishes READY (or FAILED with a message); waiting
 * parties claim tasks until tasks_done == ntasks; each party then releases the slot, and
 * the last to release resets it for s + TH_SLOTS. A party that needs a slot its own older,
 * unwaited work still holds completes that work first (bounded in-flight window). */
#ifndef DT_THREADS_IMPL_H
#define DT_THREADS_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "comm/comm_impl.h"

/* Collectives one group may have in flight at once (per rank: async ones not yet waited). */
#define TH_SLOTS 16
/* Bytes one task moves or reduces per destination. */
#define TH_CHUNK_BYTES (256 * 1024)
#define TH_MESSAGE 1024
/* Collectives whose results total at least this many bytes bypass the caches. */
#define TH_STREAMING_BYTES (32LL << 20)

enum { TH_GATHERING = 0, TH_READY = 1, TH_FAILED = 2 };

typedef struct th_group th_group;

/* How the threads backend moves the memory of a device kind the host cannot read (CUDA; a test's
 * host-memory stand-in). The rendezvous is the CPU path's (post, prepare, tasks, release);
 * what differs is who moves the bytes. Such a collective is ONE task that queues every copy
 * and reduction on the queue of the rank whose thread runs it (a CUDA stream), after a wait
 * for every party's marker; it ends with a `done` marker that every party's own queue waits
 * for before its collective completes. No host thread reads device memory or waits for the
 * device: ordering between the ranks' queues is by markers (CUDA events).
 * Errors set dt_last_error() and return a status; begin's run state is always ended. */
typedef struct th_device_ops {
  /* On the posting rank's thread: marks the point of its queue on `device` after which the
   * buffers it posted hold their values (a CUDA event recorded on its current stream). */
  dt_status (*mark)(const char *op, int device, void **marker);
  /* On the running thread, its queue on `device`: waits for the n parties' markers. */
  dt_status (*begin)(const char *op, int device, void *const *markers, int n, void **run);
  dt_status (*copy)(void *run, int dst_device, void *dst, int src_device, const void *src,
                    size_t bytes);
  /* dt__reduce_buffers' contract (sources read before any destination is written, avg
   * divides by world) on buffers of the given devices. */
  dt_status (*reduce)(void *run, dt_dtype dtype, dt_reduce_op op, int nsrc, const void *const *src,
                      const int *src_devices, int ndst, void *const *dst, const int *dst_devices,
                      int64_t n, int world);
  /* Marks the end of everything queued since begin (*done) and frees the run. *done is NULL
   * when it fails. */
  dt_status (*end)(void *run, dt_status so_far, void **done);
  /* On a party's thread: its queue on `device` waits for `done`. */
  dt_status (*wait)(const char *op, int device, void *done);
  /* Frees a marker (mark's or end's) once nothing will wait for it again. */
  void (*release)(void *marker);
} th_device_ops;

/* The mover of device kind `kind` (CUDA in a CUDA build, or one registered), or NULL. */
const th_device_ops *dt__th_device_ops(int kind);
/* Registers (NULL: removes) the mover of a run-time device kind (tests' stand-in). Not thread
 * safe: before any rank uses the kind. DT_ERR_INVALID for the CPU, CUDA or a kind outside the
 * table. */
dt_status dt__th_register_device(int kind, const th_device_ops *ops);
#ifdef DT_HAVE_CUDA
extern const th_device_ops dt__th_cuda_ops; /* threads_cuda.c */
#endif

typedef struct th_post {
  dt_coll_args args;
  dt_work *work; /* the poster's work while it holds the slot; NULL once released */
  void *marker;  /* device collectives: the poster's marker (th_device_ops.mark) */
  const th_device_ops *marker_ops; /* who made it (frees it) */
  /* dt_comm_split results, written by the task that builds the new groups. */
  th_group *split_group;
  int split_rank;
} th_post;

typedef struct th_slot {
  _Atomic uint64_t seq; /* the sequence number this slot serves now */
  atomic_int arrived;   /* parties that posted */
  atomic_int state;     /* TH_GATHERING, TH_READY, TH_FAILED */
  atomic_int_fast64_t next_task;
  atomic_int_fast64_t tasks_done;
  atomic_int active;   /* threads inside a task right now */
  atomic_int released; /* parties done with the slot */
  int64_t ntasks;      /* set by the last arriver before READY */
  int64_t npieces;     /* pieces of the collective (a device collective runs them in one task) */
  int64_t chunks_per_piece;
  int64_t chunk_elems;
  dt_status task_status;           /* a task's failure (split: out of memory; a device's error) */
  char task_message[TH_MESSAGE];   /* its message */
  const th_device_ops *device_ops; /* set by prepare for device memory; NULL for host memory */
  void *done;                      /* device collectives: the marker every party waits for */
  dt_status error;                 /* FAILED: the status every party returns */
  char message[TH_MESSAGE];        /* FAILED: the message */
  _Atomic uint64_t *posted;        /* [nparties]: seq + 1 once that party posted */
  th_post *posts;                  /* [nparties] */
  int64_t *offsets;                /* [nparties + 1]: element offsets for uneven kinds */
} th_slot;

typedef struct th_ring {
  int nparties;
  const int *party_ranks; /* group rank of each party; NULL: party p is rank p */
  int party_storage[2];
  th_slot slots[TH_SLOTS];
} th_ring;

typedef struct th_domain {
  /* References: one of its creator (dt_comm_spawn, or the one-rank world of dt_comm_init) and
   * one per live dt_comm_split group, so that a mesh whose last tensor is released after the
   * ranks ended (or after its world was destroyed) still frees its groups into a live domain. */
  atomic_int refs;
  atomic_int aborted;
  atomic_uint epoch;    /* bumped when a rank exits: waiters re-check who they wait for */
  pthread_mutex_t lock; /* guards everything below */
  dt_status abort_status;
  const th_ring *abort_ring; /* the ring and sequence number that timed out, if any */
  uint64_t abort_seq;
  char abort_message[TH_MESSAGE];
  th_group *groups; /* every live group, for wake-ups */
  int world_size;
  atomic_int *exited; /* [world_size]: the rank's function has returned */
  /* [world_size]: groups the rank made with dt_comm_split (a mesh makes one per dimension)
   * and has not destroyed: dt_comm_spawn reports what a rank function leaves behind. */
  atomic_int *live_groups;
  dt_status first_status;
  int first_rank;
  char first_message[TH_MESSAGE];
} th_domain;

struct th_group {
  th_domain *domain;
  uint64_t id;
  int size;
  int *world_ranks; /* [size] */
  atomic_int refcount;
  th_ring ring;
  _Atomic(th_ring *) *channels; /* [size * size], src * size + dst, made on first use */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  atomic_int waiters;
  th_group *next, *prev; /* the domain's list */
};

/* One rank's backend state (dt_comm->state). */
typedef struct th_comm {
  th_group *group;
  uint64_t *send_seq; /* [size]: sends started to each peer */
  uint64_t *recv_seq; /* [size]: receives started from each peer */
  bool owns_domain;   /* a one-rank world from dt_comm_init */
  int split_by;       /* made by dt_comm_split: the world rank that made it, else -1 */
} th_comm;

/* The files call down in this order: threads_world.c (the backend table, worlds) ->
 * threads_sync.c (posting and waiting) -> threads_tasks.c (the data movement) ->
 * threads_group.c (rings, groups, domains). */

/* threads_group.c */
th_group *dt__th_group_create(th_domain *domain, int size, const int *world_ranks);
void dt__th_group_release(th_group *group);
/* The ring of messages from src to dst in group, made by whichever end gets there first; NULL
 * when out of memory. */
th_ring *dt__th_channel(th_group *group, int src, int dst);
/* A domain of world_size ranks with no group yet; NULL when out of memory. */
th_domain *dt__th_domain_create(int world_size);
/* Frees the domain and the groups still in it (a rank function may forget to destroy some). */
void dt__th_domain_free(th_domain *domain);
/* Takes / drops a reference to the domain; the last drop frees it (dt__th_domain_free). */
void dt__th_domain_retain(th_domain *domain);
void dt__th_domain_release(th_domain *domain);
void dt__th_abort(th_domain *domain, dt_status status, const th_ring *ring, uint64_t seq,
                  const char *message);
void dt__th_wake_all(th_domain *domain);
dt_status dt__th_split_task(th_group *group, th_slot *slot);

/* threads_world.c */
dt_comm *dt__th_comm_new(th_group *group, int rank, bool owns_domain);

/* threads_sync.c */
void dt__th_notify(th_group *group);
dt_status dt__th_post(dt_comm *comm, th_ring *ring, int party, uint64_t seq, dt_work *work);
dt_status dt__th_complete(dt_comm *comm, dt_work *work, bool blocking, bool *done);

/* threads_tasks.c */
bool dt__th_prepare(dt_comm *comm, th_ring *ring, th_slot *slot);
void dt__th_run_task(th_group *group, th_ring *ring, th_slot *slot, int64_t task, int party);

#endif /* DT_THREADS_IMPL_H */
