/* Process groups: the public calls that create, split, name and destroy groups and wait on
 * works. They call the backends (through the registry and the backend interface); what the
 * backends themselves need (dt__comm_new, dt__work_finish, ...) is in group.c below both. The
 * collectives' public wrappers live in collectives.c. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "profile/profile_impl.h"
#include "tensor/tensor_impl.h"

dt_status dt_comm_init(const dt_comm_options *opts, dt_comm **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_comm_init: out is NULL");
  *out = NULL;
  dt_comm_options defaults = {0};
  if (!opts) opts = &defaults;
  const char *backend = opts->backend;
  if (!backend) backend = getenv("DT_BACKEND");
  if (!backend || !*backend) backend = "threads";
  if (opts->timeout_ms < 0) {
    return dt__error(DT_ERR_INVALID,
                     "dt_comm_init: timeout_ms is %lld, expected > 0 (or 0 for the default)",
                     (long long)opts->timeout_ms);
  }

  bool unbuilt = false;
  char names[64];
  dt__comm_backend_names(names, sizeof names);
  dt_comm_backend_init_fn init = dt__comm_backend_find(backend, &unbuilt);
  if (!init && unbuilt) {
    bool nccl = strcmp(backend, "nccl") == 0;
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_comm_init: backend \"%s\" is not built into this libdtensor (%s); %s, or "
                     "use one of %s",
                     backend,
                     nccl ? "it needs -DDT_WITH_CUDA=ON and NCCL found by CMake"
                          : "CMake found no MPI, or DT_WITH_MPI=OFF",
                     nccl ? "install NCCL and reconfigure with CUDA"
                          : "install an MPI (e.g. Open MPI) and reconfigure",
                     names);
  }
  if (!init) {
    return dt__error(DT_ERR_INVALID, "dt_comm_init: unknown backend \"%s\" (from %s); expected %s",
                     backend, opts->backend ? "options" : "DT_BACKEND", names);
  }
  dt_status status = init(opts, out);
  if (status != DT_OK) return status;
  if (opts->timeout_ms > 0) (*out)->timeout_ms = opts->timeout_ms;
  return DT_OK;
}

dt_status dt__comm_split_ex(dt_comm *comm, int color, int key, const dt_split_hint *hint,
                            dt_comm **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_comm_split: out is NULL");
  *out = NULL;
  if (!comm) return dt__error(DT_ERR_INVALID, "dt_comm_split: comm is NULL");
  dt_status status = comm->backend->split(comm, color < 0 ? -1 : color, key, hint, out);
  if (status != DT_OK) {
    *out = NULL;
    return status;
  }
  if (*out) {
    (*out)->timeout_ms = comm->timeout_ms;
    (*out)->debug = comm->debug;
    snprintf((*out)->name, sizeof(*out)->name, "%.40s/split(color=%d)", comm->name, color);
  }
  return DT_OK;
}

dt_status dt_comm_split(dt_comm *comm, int color, int key, dt_comm **out) {
  return dt__comm_split_ex(comm, color, key, NULL, out);
}

void dt_comm_destroy(dt_comm *comm) {
  if (!comm || comm->owned_by_spawn) return;
  /* The world must outlive its meshes (mesh.h): say so rather than leave them dangling. */
  if (comm->meshes_live > 0) {
    dt__log(DT_LOG_WARN,
            "dt_comm_destroy: group '%s' (rank %d of %d) is destroyed while %d mesh%s made on it "
            "%s not destroyed (dt_mesh_destroy first): %s not usable after it",
            comm->name, comm->rank, comm->size, comm->meshes_live,
            comm->meshes_live == 1 ? "" : "es", comm->meshes_live == 1 ? "is" : "are",
            comm->meshes_live == 1 ? "it is" : "they are");
  }
  comm->backend->destroy(comm);
  comm->state = NULL; /* a mesh may still hold the handle (dt__comm_retain), never the state */
  dt__comm_free(comm);
}

void dt_comm_abort(dt_comm *comm, const char *reason) {
  if (comm) comm->backend->abort(comm, reason);
}

/* Getters answer -1 / 0 / NULL for a NULL group rather than crash. */
int dt_comm_rank(const dt_comm *comm) { return comm ? comm->rank : -1; }
int dt_comm_size(const dt_comm *comm) { return comm ? comm->size : 0; }
const char *dt_comm_backend_name(const dt_comm *comm) { return comm ? comm->backend->name : NULL; }
uint64_t dt_comm_id(const dt_comm *comm) { return comm ? comm->id : 0; }
const char *dt_comm_name(const dt_comm *comm) { return comm ? comm->name : NULL; }

void dt_comm_set_name(dt_comm *comm, const char *name) {
  if (comm) snprintf(comm->name, sizeof comm->name, "%s", name ? name : "");
}

dt_status dt_comm_set_timeout(dt_comm *comm, int64_t timeout_ms) {
  if (!comm) return dt__error(DT_ERR_INVALID, "dt_comm_set_timeout: comm is NULL");
  if (timeout_ms <= 0) {
    return dt__error(DT_ERR_INVALID, "dt_comm_set_timeout: timeout_ms is %lld, expected > 0",
                     (long long)timeout_ms);
  }
  comm->timeout_ms = timeout_ms;
  return DT_OK;
}

int64_t dt_comm_timeout(const dt_comm *comm) { return comm ? comm->timeout_ms : 0; }

/* ---- Work handles ----------------------------------------------------------------------- */

/* The span of an async collective, from its issue to now (its completion), once. */
static void record_async_span(dt_work *work) {
  if (DT_LIKELY(work->profile_start == 0)) return;
  dt__profile_record_bytes(work->args.op_name, DT__PROFILE_CAT_COLLECTIVE, DT_PROFILER_LANE_COMM,
                           work->profile_start, dt__profile_now(), work->profile_bytes,
                           work->comm->size);
  work->profile_start = 0;
}

dt_status dt_work_wait(dt_work *work) {
  if (!work) return dt__error(DT_ERR_INVALID, "dt_work_wait: work is NULL");
  if (!work->done) {
    dt__profile_scope scope;
    dt__profile_begin(&scope, "wait", DT__PROFILE_CAT_WAIT, DT_PROFILER_LANE_COMM);
    dt_status status = work->comm->backend->wait(work->comm, work);
    if (!work->done) dt__work_finish(work, status);
    dt__profile_end_text(&scope, work->args.op_name);
  }
  record_async_span(work);
  if (work->status != DT_OK) return dt__error(work->status, "%s", work->message);
  return DT_OK;
}

dt_status dt_work_test(dt_work *work, bool *done) {
  if (!work || !done)
    return dt__error(DT_ERR_INVALID, "dt_work_test: %s is NULL", work ? "done" : "work");
  if (!work->done && work->comm->backend->test) {
    bool finished = false;
    dt_status status = work->comm->backend->test(work->comm, work, &finished);
    if (finished && !work->done) dt__work_finish(work, status);
  }
  if (work->done) record_async_span(work);
  *done = work->done;
  return DT_OK;
}

void dt_work_destroy(dt_work *work) {
  if (!work) return;
  if (!work->done) (void)dt_work_wait(work);
  record_async_span(work);
  dt__free(work->owned);
  work->owned = NULL;
  if (work->pooled) {
    work->next_free = work->comm->free_works;
    work->comm->free_works = work;
  }
}
