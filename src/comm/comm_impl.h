/* Private layer of process groups: the backend interface every backend implements, the
 * dt_comm and dt_work layouts, and helpers shared by the backends.
 *
 * The public wrappers in comm.c validate every argument on the calling rank, turn tensors
 * into flat buffers and element counts (dt_coll_args), and hand them to the backend. A
 * backend never sees a tensor, so it never needs to validate shapes; it only has to move
 * bytes and, where it can, check that the ranks agree (see dt__coll_same_call). */
#ifndef DT_COMM_IMPL_H
#define DT_COMM_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/core_impl.h"
#include "dtensor/comm.h"

/* The collectives a backend implements, each with the name a call description prints
 * (dt__coll_describe): X(id, name) gives DT_COLL_<id>. SPLIT is internal (dt_comm_split on
 * backends that build it as a collective). */
#define DT_COLL_KINDS(X)                                                                           \
  X(ALL_REDUCE, all_reduce)                                                                        \
  X(ALL_GATHER, all_gather)                                                                        \
  X(REDUCE_SCATTER, reduce_scatter)                                                                \
  X(ALL_TO_ALL, all_to_all)                                                                        \
  X(BROADCAST, broadcast)                                                                          \
  X(SCATTER, scatter)                                                                              \
  X(GATHER, gather)                                                                                \
  X(BARRIER, barrier)                                                                              \
  X(SEND, send)                                                                                    \
  X(RECV, recv)                                                                                    \
  X(SPLIT, split)

typedef enum dt_coll_kind {
#define DT_COLL_KIND_ENUM(id, name) DT_COLL_##id,
  DT_COLL_KINDS(DT_COLL_KIND_ENUM)
#undef DT_COLL_KIND_ENUM
      DT_COLL_KIND_COUNT
} dt_coll_kind;

/* One collective, as flat buffers. Counts are in ELEMENTS unless said otherwise; the
 * per-rank arrays are in ROWS of row_numel elements (so they stay small integers even for
 * huge tensors). Pointers are borrowed from the caller and valid until the work completes.
 *
 *   kind            send (this rank)               recv (this rank)           count
 *   ALL_REDUCE      count elements                 count elements (may = send) count
 *   BROADCAST       = recv on root, else NULL      count elements             count
 *   ALL_GATHER      count elements                 size*count, or sum(counts) per rank
 *                   (counts: counts[rank] rows)    rows when counts != NULL
 *   REDUCE_SCATTER  size*count, or sum(counts)     count elements             per rank
 *                   rows                           (counts[rank] rows)
 *   ALL_TO_ALL      send_counts rows per peer      recv_counts rows per peer  block size
 *                   (NULL: count elements each)    (NULL: count elements each) when even
 *   SCATTER         size*count on root, else NULL  count elements             per rank
 *   GATHER          count elements                 size*count on root, else NULL
 *   BARRIER         -                              -                          0
 *   SEND / RECV     count elements (peer = root)   count elements (peer = root)
 *   SPLIT           color in root, key in count (internal)
 */
typedef struct dt_coll_args {
  dt_coll_kind kind;
  dt_dtype dtype;
  dt_reduce_op op;
  int root;
  const void *send;
  void *recv;
  int64_t count;
  int64_t row_numel;
  const int64_t *counts;
  const int64_t *send_counts;
  const int64_t *recv_counts;
  const char *op_name; /* the public name, for messages ("all_gather_into_tensor") */
  /* Where send and recv live on this rank: a device key (tensor/device_impl.h, kind | index
   * << 8), 0 for host memory (the CPU's; barrier and all_gather_object move host bytes). A
   * rank's send and recv are on one device; ranks may differ where a backend allows it. */
  uint32_t device;
} dt_coll_args;

/* Observer of completed collectives on the calling thread (the dist layer's comm ledger):
 * the collective's public name, the bytes of its larger buffer on this rank, and the
 * group size. NULL when nobody listens. */
typedef void (*dt_comm_observer_fn)(const char *op_name, int64_t bytes, int group_size, void *user);
extern _Thread_local dt_comm_observer_fn dt__comm_observer;
extern _Thread_local void *dt__comm_observer_user;

/* Bytes of the larger of a collective's send and receive buffers on this rank. */
int64_t dt__coll_bytes(const dt_comm *comm, const dt_coll_args *args);

#define DT_WORK_MESSAGE 512

/* An operation in flight. Sync collectives use one on the stack; async ones come from the
 * comm's free list (no allocation once warm). */
struct dt_work {
  dt_comm *comm;
  dt_coll_args args;
  uint64_t seq; /* the group's sequence number of this collective */
  dt_status status;
  bool done;
  bool pooled; /* false: on the caller's stack, release does nothing */
  /* Backend-private per-operation state. */
  void *backend_ptr[2];
  int64_t backend_int[2];
  /* Buffers a fallback owns for the duration of the operation (freed on release). */
  void *owned;
  int32_t scratch[2];
  char message[DT_WORK_MESSAGE]; /* the failure message, replayed by a second wait */
  dt_work *next_free;
  /* An async collective issued while a profiler recorded: its span runs from the issue
   * (profile_start, a profiler tick) to the end of the wait that completes it (0: none). */
  uint64_t profile_start;
  int64_t profile_bytes;
};

/* When the caller of a split already knows the result (the device mesh does), it says so:
 * backends that cannot learn it from the peers (fake) use it. size 0 means unknown. */
typedef struct dt_split_hint {
  int size;
  int rank;
} dt_split_hint;

typedef dt_status (*dt_coll_start_fn)(dt_comm *comm, dt_work *work);

/* The bit of a collective kind in a backend's `supports` mask. */
#define DT_COLL_BIT(kind) (1u << (unsigned)(kind))

/* The kinds every backend must support: the public wrapper builds the others from these. */
#define DT_COLL_REQUIRED                                                                           \
  (DT_COLL_BIT(DT_COLL_ALL_REDUCE) | DT_COLL_BIT(DT_COLL_ALL_GATHER) |                             \
   DT_COLL_BIT(DT_COLL_REDUCE_SCATTER) | DT_COLL_BIT(DT_COLL_ALL_TO_ALL) |                         \
   DT_COLL_BIT(DT_COLL_BROADCAST) | DT_COLL_BIT(DT_COLL_SEND) | DT_COLL_BIT(DT_COLL_RECV))

/* Every kind a public collective can ask for (SPLIT goes through the split entry). */
#define DT_COLL_ALL                                                                                \
  (DT_COLL_REQUIRED | DT_COLL_BIT(DT_COLL_BARRIER) | DT_COLL_BIT(DT_COLL_SCATTER) |                \
   DT_COLL_BIT(DT_COLL_GATHER))

/* A backend: data, filled with designated initializers.
 *
 * start begins a collective described by work->args (work->seq is already set for group
 * collectives); it is only called with a kind whose DT_COLL_BIT is in `supports`. It either
 * completes it (sets work->done and work->status) or leaves it pending for wait/test. It
 * returns an error only when nothing was started. One entry serves every kind because each
 * backend moves the bytes of all kinds through one queue or one request; the mask says
 * which kinds it implements, and the public wrapper (comm/collectives.c) builds the others:
 *   required (DT_COLL_REQUIRED): ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL,
 *     BROADCAST, SEND, RECV
 *   optional: BARRIER (an all_reduce of one int), SCATTER and GATHER (an all_to_all with
 *     counts where only the root sends or receives)
 * tests/test_comm_fallback.c runs every fallback through a backend that leaves them out.
 * wait: required unless start always completes; test: optional (reports work->done).
 * all_gather_object: optional (two all_gathers: the lengths, then the bytes). */
typedef struct dt_comm_backend {
  const char *name;
  uint32_t supports; /* DT_COLL_BIT of every kind start implements */
  /* Bit 1 << kind of every device kind (dt_device_kind) whose memory it moves besides the
   * CPU's, which every backend moves: 0 for the CPU only. */
  uint32_t devices;
  /* Optional: true when it moves memory of device kind `kind` besides those of `devices` (a
   * kind whose mover registers at run time: the threads backend's test stand-in). */
  bool (*moves_device)(int kind);
  /* Optional: the index of the device of kind `kind` this rank's group is bound to (NCCL: the
   * GPU its communicator runs on), or -1 when the backend binds none (threads, MPI: a mesh
   * then gives rank r device r % count). */
  int (*device_index)(const dt_comm *comm, int kind);
  /* True when the backend times its collectives on device queues itself for the profiler
   * (dt__profile_device_begin on its own stream: NCCL); else collectives.c times a
   * synchronous collective on device memory on the caller's queue. */
  bool times_device;
  dt_coll_start_fn start;
  dt_status (*wait)(dt_comm *comm, dt_work *work);
  dt_status (*test)(dt_comm *comm, dt_work *work, bool *done);
  /* Required. Collective; sets *out (NULL for a negative color). */
  dt_status (*split)(dt_comm *comm, int color, int key, const dt_split_hint *hint, dt_comm **out);
  /* Required. Frees comm->state (the wrapper frees the handle). */
  void (*destroy)(dt_comm *comm);
  /* Required. Aborts the group's world; reason may be NULL. */
  void (*abort)(dt_comm *comm, const char *reason);
  dt_status (*all_gather_object)(dt_comm *comm, const void *data, size_t nbytes, dt_objects **out);
  /* Optional: true once the group's world is aborted. A backend whose groups are made over
   * another group (nccl over a threads world) follows that group's abort through it. */
  bool (*is_aborted)(const dt_comm *comm);
} dt_comm_backend;

/* A process group as seen by one rank. Used by one thread at a time. */
struct dt_comm {
  const dt_comm_backend *backend;
  int rank;
  int size;
  uint64_t id;
  uint64_t seq;            /* group collectives this rank has started */
  uint64_t meshes_created; /* meshes made on this handle: their ids agree across ranks */
  int meshes_live;         /* of those, not yet dt_mesh_destroy'ed (dt_comm_spawn reports them) */
  int64_t timeout_ms;
  bool debug;          /* DT_DEBUG_COLLECTIVES=1: backends compare fingerprints */
  bool owned_by_spawn; /* the dt_comm_spawn world: dt_comm_destroy ignores it */
  /* References to the handle: its owner's and one per mesh made on it, so that a mesh
   * destroyed after its world (after dt_comm_spawn returned, or after dt_comm_destroy) still
   * finds the handle; the backend state goes with the owner's (destroy). */
  atomic_int handle_refs;
  char name[64];
  dt_work *free_works;
  void *state; /* the backend's */
};

/* True when comm's backend moves memory of device `kind` (the CPU's always). */
static inline bool dt__comm_moves_device(const dt_comm *comm, int kind) {
  return kind == 0 || (comm->backend->devices >> kind & 1u) != 0 ||
         (comm->backend->moves_device && comm->backend->moves_device(kind));
}

/* ---- group.c: handles, works and results, below the wrappers and the backends ------------ */

/* A new handle (timeout and debug flag from the environment, a fresh id unless id != 0).
 * Returns NULL on allocation failure. */
dt_comm *dt__comm_new(const dt_comm_backend *backend, int rank, int size, uint64_t id, void *state);
/* Drops a reference to the handle (its creator holds one); the last frees it and its free
 * works (never the backend state, which the backend's destroy frees). NULL is ignored. */
void dt__comm_free(dt_comm *comm);
/* Takes a reference to the handle (a mesh made on it); returns comm. */
dt_comm *dt__comm_retain(dt_comm *comm);

/* A process-wide unique id for a new group. */
uint64_t dt__comm_next_id(void);

/* Marks a work finished with `status`, saving the current error message if it failed. */
void dt__work_finish(dt_work *work, dt_status status);

/* A dt_objects of `count` strings and `total` bytes in one allocation (lengths and offsets
 * left for the caller to fill). NULL when out of memory. */
dt_objects *dt__objects_alloc(int count, size_t total);

/* ---- comm.c ------------------------------------------------------------------------------ */

/* Splits with a hint (see dt_split_hint); dt_comm_split passes none. */
dt_status dt__comm_split_ex(dt_comm *comm, int color, int key, const dt_split_hint *hint,
                            dt_comm **out);

/* ---- coll_args.c: what a rank called, compared across ranks ------------------------------ */

/* "all_reduce(float32, 8 elements, op=sum)" — what a rank called, for mismatch messages. */
char *dt__coll_describe(const dt_coll_args *args, int size, char *buf, size_t bufsize);

/* True when two ranks' arguments describe the same collective (what must agree across
 * the group: kind, dtype, op, root, counts). all_to_all's cross-rank counts are checked
 * separately with dt__coll_check_all_to_all. */
bool dt__coll_same_call(const dt_coll_args *a, const dt_coll_args *b, int size);

/* For all_to_all: rank s's send_counts[d] must equal rank d's recv_counts[s] for every
 * pair; args[r] is rank r's call. Returns true when they agree. */
bool dt__coll_check_all_to_all(const dt_coll_args *const *args, int size, int *bad_src,
                               int *bad_dst);

/* ---- reduce.c ---------------------------------------------------------------------------- */

/* Element-wise reduction of nsrc buffers of n elements into ndst buffers (every dst gets
 * the result). Reads each block of all sources before writing any destination, so a
 * destination may be a source (in place). avg divides by `world`. `streaming` says the
 * whole collective is larger than the caches: results may bypass them. */
void dt__reduce_buffers(dt_dtype dtype, dt_reduce_op op, int nsrc, const void *const *src, int ndst,
                        void *const *dst, int64_t n, int world, bool streaming);

/* Backends. */
extern const dt_comm_backend dt__threads_backend;
extern const dt_comm_backend dt__fake_backend;

/* Backend constructors: each makes the world group of its backend from dt_comm_init's
 * options. dt_comm_init finds them by name in the registry (comm/registry.c). */
typedef dt_status (*dt_comm_backend_init_fn)(const dt_comm_options *opts, dt_comm **out);
dt_status dt__threads_init_single(const dt_comm_options *opts, dt_comm **out);
dt_status dt__fake_init(const dt_comm_options *opts, dt_comm **out);
dt_status dt__mpi_init(const dt_comm_options *opts, dt_comm **out);  /* only with DT_HAVE_MPI */
dt_status dt__nccl_init(const dt_comm_options *opts, dt_comm **out); /* only with DT_HAVE_NCCL */

/* The registered backend called `name`, or NULL. `*known_unbuilt` is set when the name is a
 * backend this build leaves out (mpi without an MPI). */
dt_comm_backend_init_fn dt__comm_backend_find(const char *name, bool *known_unbuilt);

/* The registered backends' names for messages: "threads", "fake", "mpi" or "nccl". */
void dt__comm_backend_names(char *buf, size_t size);

#endif /* DT_COMM_IMPL_H */
