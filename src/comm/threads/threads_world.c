/* Threads backend, top file: the backend table (start, wait, split, destroy, abort), one-rank
 * worlds (dt_comm_init) and dt_comm_spawn. Groups, rings and domains are in threads_group.c. */
#include <stdio.h>
#include <string.h>

#include "comm/threads/threads_impl.h"
#include "dtensor/profile.h"

/* ---- The backend ------------------------------------------------------------------------ */

dt_comm *dt__th_comm_new(th_group *g, int rank, bool owns_domain) {
  th_comm *tc = dt__calloc(sizeof *tc);
  if (!tc) return NULL;
  tc->group = g;
  tc->owns_domain = owns_domain;
  tc->split_by = -1;
  tc->send_seq = dt__calloc(sizeof *tc->send_seq * (size_t)g->size);
  tc->recv_seq = dt__calloc(sizeof *tc->recv_seq * (size_t)g->size);
  dt_comm *comm = tc->send_seq && tc->recv_seq
                      ? dt__comm_new(&dt__threads_backend, rank, g->size, g->id, tc)
                      : NULL;
  if (!comm) {
    dt__free(tc->send_seq);
    dt__free(tc->recv_seq);
    dt__free(tc);
  }
  return comm;
}

static dt_status th_start(dt_comm *comm, dt_work *w) {
  th_comm *tc = comm->state;
  th_group *g = tc->group;
  if (w->args.kind == DT_COLL_SEND || w->args.kind == DT_COLL_RECV) {
    bool is_send = w->args.kind == DT_COLL_SEND;
    int peer = w->args.root;
    th_ring *ring =
        is_send ? dt__th_channel(g, comm->rank, peer) : dt__th_channel(g, peer, comm->rank);
    if (!ring) return dt__error(DT_ERR_NOMEM, "%s: out of memory for a channel", w->args.op_name);
    uint64_t seq = is_send ? tc->send_seq[peer]++ : tc->recv_seq[peer]++;
    return dt__th_post(comm, ring, is_send ? 0 : 1, seq, w);
  }
  return dt__th_post(comm, &g->ring, comm->rank, w->seq, w);
}

static dt_status th_wait(dt_comm *comm, dt_work *w) {
  bool done = false;
  return dt__th_complete(comm, w, true, &done);
}

static dt_status th_test(dt_comm *comm, dt_work *w, bool *done) {
  return dt__th_complete(comm, w, false, done);
}

static dt_status th_split(dt_comm *comm, int color, int key, const dt_split_hint *hint,
                          dt_comm **out) {
  (void)hint;
  th_group *g = ((th_comm *)comm->state)->group;
  dt_work w;
  memset(&w, 0, sizeof w);
  w.comm = comm;
  w.args = (dt_coll_args){
      .kind = DT_COLL_SPLIT, .root = color, .count = key, .op_name = "dt_comm_split"};
  w.seq = comm->seq++;
  dt_status status = dt__th_post(comm, &g->ring, comm->rank, w.seq, &w);
  if (status != DT_OK) return status;
  bool done = false;
  status = dt__th_complete(comm, &w, true, &done);
  if (status != DT_OK) return status;
  th_group *fresh = w.backend_ptr[1];
  if (!fresh) return DT_OK;
  *out = dt__th_comm_new(fresh, w.scratch[0], false);
  if (!*out) {
    dt__th_group_release(fresh);
    return dt__error(DT_ERR_NOMEM, "dt_comm_split: out of memory");
  }
  th_comm *made = (*out)->state;
  made->split_by = g->world_ranks[comm->rank];
  atomic_fetch_add(&g->domain->live_groups[made->split_by], 1);
  dt__th_domain_retain(g->domain);
  return DT_OK;
}

static void th_destroy(dt_comm *comm) {
  th_comm *tc = comm->state;
  th_domain *d = tc->group->domain;
  if (tc->split_by >= 0) atomic_fetch_sub(&d->live_groups[tc->split_by], 1);
  dt__th_group_release(tc->group);
  if (tc->owns_domain || tc->split_by >= 0) dt__th_domain_release(d);
  dt__free(tc->send_seq);
  dt__free(tc->recv_seq);
  dt__free(tc);
}

static void th_abort(dt_comm *comm, const char *reason) {
  th_group *g = ((th_comm *)comm->state)->group;
  char message[TH_MESSAGE];
  snprintf(message, sizeof message, "rank %d of group '%s' called dt_comm_abort: %s", comm->rank,
           comm->name, reason ? reason : "no reason given");
  dt__th_abort(g->domain, DT_ERR_ABORTED, NULL, 0, message);
}

static bool th_moves_device(int kind) { return dt__th_device_ops(kind) != NULL; }

static bool th_is_aborted(const dt_comm *comm) {
  return atomic_load(&((const th_comm *)comm->state)->group->domain->aborted) != 0;
}

const dt_comm_backend dt__threads_backend = {
    .name = "threads",
    .supports = DT_COLL_ALL,
    .moves_device = th_moves_device,
    .start = th_start,
    .wait = th_wait,
    .test = th_test,
    .split = th_split,
    .destroy = th_destroy,
    .abort = th_abort,
    .is_aborted = th_is_aborted,
    .all_gather_object = NULL, /* the generic two-step exchange */
};

/* ---- Worlds ------------------------------------------------------------------------------ */

dt_status dt__threads_init_single(const dt_comm_options *opts, dt_comm **out) {
  if (opts->world_size > 1 || opts->rank != 0) {
    return dt__error(DT_ERR_INVALID,
                     "dt_comm_init: the threads backend makes a one-rank world here (rank %d of "
                     "%d asked); use dt_comm_spawn for several ranks",
                     opts->rank, opts->world_size);
  }
  th_domain *d = dt__th_domain_create(1);
  int zero = 0;
  th_group *g = d ? dt__th_group_create(d, 1, &zero) : NULL;
  dt_comm *comm = g ? dt__th_comm_new(g, 0, true) : NULL;
  if (!comm) {
    if (d) dt__th_domain_free(d);
    return dt__error(DT_ERR_NOMEM, "dt_comm_init: out of memory");
  }
  *out = comm;
  return DT_OK;
}

typedef struct spawn_rank {
  th_domain *domain;
  dt_comm *comm;
  dt_rank_fn fn;
  void *arg;
  int rank;
  pthread_t thread;
  bool started;
} spawn_rank;

static void run_rank(spawn_rank *r) {
  th_domain *d = r->domain;
  dt_clear_error();
  dt_profiler_set_rank(r->rank); /* this thread's events belong to its rank */
  dt_status status = r->fn(r->comm, r->arg);
  if (status != DT_OK) {
    char message[TH_MESSAGE];
    if (dt_last_error()[0]) {
      snprintf(message, sizeof message, "%s", dt_last_error());
    } else {
      snprintf(message, sizeof message, "its function returned %s without an error message",
               dt_status_string(status));
    }
    pthread_mutex_lock(&d->lock);
    if (d->first_status == DT_OK) {
      d->first_status = status;
      d->first_rank = r->rank;
      snprintf(d->first_message, sizeof d->first_message, "%s", message);
    }
    pthread_mutex_unlock(&d->lock);
    char reason[TH_MESSAGE];
    snprintf(reason, sizeof reason, "rank %d failed (%s): %.900s", r->rank,
             dt_status_string(status), message);
    dt__th_abort(d, DT_ERR_ABORTED, NULL, 0, reason);
  }
  atomic_store(&d->exited[r->rank], 1);
  atomic_fetch_add(&d->epoch, 1);
  dt__th_wake_all(d);
}

/* A rank function that returns with meshes or dt_comm_split groups it did not destroy: say so,
 * once per rank, as PyTorch warns about a process group never destroyed. They stay safe to
 * release afterwards (each group keeps the domain alive), but no collective can run on them
 * once the ranks have ended. Groups still held by tensors of a destroyed mesh are counted too.
 * The run's status is kept. */
static void report_leaks(th_domain *d, const spawn_rank *ranks) {
  for (int r = 0; r < d->world_size; r++) {
    int meshes = ranks[r].comm->meshes_live, groups = atomic_load(&d->live_groups[r]);
    if (meshes == 0 && groups == 0) continue;
    dt__log(DT_LOG_WARN,
            "dt_comm_spawn: rank %d returned with %d mesh%s not destroyed (dt_mesh_destroy) and "
            "%d group%s made by dt_comm_split still alive (a mesh holds one per dimension until "
            "it is destroyed and its last tensor released); releasing them later is safe, "
            "communicating on them is not",
            r, meshes, meshes == 1 ? "" : "es", groups, groups == 1 ? "" : "s");
  }
}

static void *rank_main(void *arg) {
  run_rank(arg);
  return NULL;
}

dt_status dt_comm_spawn(int world_size, dt_rank_fn fn, void *arg) {
  if (world_size < 1 || world_size > DT_COMM_MAX_THREADS) {
    return dt__error(DT_ERR_INVALID, "dt_comm_spawn: world_size is %d, expected 1..%d", world_size,
                     DT_COMM_MAX_THREADS);
  }
  if (!fn) return dt__error(DT_ERR_INVALID, "dt_comm_spawn: fn is NULL");
  th_domain *d = dt__th_domain_create(world_size);
  spawn_rank *ranks = dt__calloc(sizeof *ranks * (size_t)world_size);
  int *identity = dt__alloc(sizeof *identity * (size_t)world_size);
  th_group *world = NULL;
  dt_status status = DT_OK;
  if (!d || !ranks || !identity) {
    status = dt__error(DT_ERR_NOMEM, "dt_comm_spawn: out of memory");
    goto done;
  }
  for (int r = 0; r < world_size; r++) identity[r] = r;
  world = dt__th_group_create(d, world_size, identity);
  if (!world) {
    status = dt__error(DT_ERR_NOMEM, "dt_comm_spawn: out of memory");
    goto done;
  }
  for (int r = 0; r < world_size; r++) {
    ranks[r] = (spawn_rank){.domain = d, .fn = fn, .arg = arg, .rank = r};
    ranks[r].comm = dt__th_comm_new(world, r, false);
    if (!ranks[r].comm) {
      status = dt__error(DT_ERR_NOMEM, "dt_comm_spawn: out of memory");
      goto done;
    }
    ranks[r].comm->owned_by_spawn = true;
  }
  /* The ranks share the cores: each rank's kernels get cores / ranks threads (thread_pool.c).
   * The calling thread is rank 0, one of them. */
  dt__rank_threads_add(world_size);
  for (int r = 1; r < world_size; r++) {
    if (pthread_create(&ranks[r].thread, NULL, rank_main, &ranks[r]) != 0) {
      dt__th_abort(d, DT_ERR_ABORTED, NULL, 0, "dt_comm_spawn could not start every rank's thread");
      status =
          dt__error(DT_ERR_INTERNAL, "dt_comm_spawn: could not create the thread of rank %d", r);
      break;
    }
    ranks[r].started = true;
  }
  if (status == DT_OK) run_rank(&ranks[0]);
  for (int r = 1; r < world_size; r++) {
    if (ranks[r].started) pthread_join(ranks[r].thread, NULL);
  }
  dt__rank_threads_add(-world_size);
  report_leaks(d, ranks);
  if (status == DT_OK && d->first_status != DT_OK) {
    status = dt__error(d->first_status, "rank %d: %s", d->first_rank, d->first_message);
  }
done:
  if (ranks) {
    for (int r = 0; r < world_size; r++) {
      if (ranks[r].comm) {
        th_destroy(ranks[r].comm);
        dt__comm_free(ranks[r].comm);
      } else if (world) {
        dt__th_group_release(world);
      }
    }
  }
  /* Groups still referenced (a mesh kept alive by a tensor the caller holds) keep the domain
   * until they are destroyed; otherwise it goes now. */
  if (d) dt__th_domain_release(d);
  dt__free(ranks);
  dt__free(identity);
  return status;
}
