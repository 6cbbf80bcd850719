/* The NCCL backend: making a world over a bootstrap group (dt_comm_nccl_create) and
 * dt_comm_init's "nccl" (over the MPI world). Every rank tells the others its host, GPUs and,
 * on rank 0, the unique id in one all_gather_object; every rank decides every rank's GPU from
 * the same bytes (nccl_plan.c), so a refusal reaches all of them before any NCCL call. */
#include <cuda_runtime_api.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "comm/nccl/nccl_impl.h"
#include "kernels/cuda/cuda_impl.h"

/* What this rank tells the others: its host, its GPUs, and on rank 0 the unique id and its
 * world (shared by the ranks of its process). */
static void hello_of(const dt_comm *bootstrap, int device, nc_world *world, nc_hello *h) {
  memset(h, 0, sizeof *h);
  dt__nc_host_of(h);
  h->requested = device;
  h->pid = (int64_t)getpid();
  int count = dt__cuda_count();
  if (count == 0) snprintf(h->reason, NC_REASON, "%s", dt__cuda_absent_reason());
  if (count > NC_MAX_DEVICES) count = NC_MAX_DEVICES;
  for (int i = 0; i < count; i++) {
    cudaError_t e = cudaDeviceGetPCIBusId(h->bus[i], NC_BUS_ID, i);
    if (e != cudaSuccess) {
      snprintf(h->reason, NC_REASON, "cudaDeviceGetPCIBusId(%d): %s", i, cudaGetErrorName(e));
      count = 0;
    }
  }
  h->count = count;
  if (bootstrap->rank == 0) {
    h->world = (uint64_t)(uintptr_t)world;
    if (count > 0) {
      ncclResult_t r = ncclGetUniqueId(&h->id);
      h->id_ok = r == ncclSuccess;
      if (!h->id_ok) snprintf(h->reason, NC_REASON, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
  }
}

static bool same_process(const nc_hello *a, const nc_hello *b) {
  return a->pid == b->pid && dt__nc_same_host(a, b);
}

/* The communicator of this rank on `device`, polled until ready or the deadline. */
static dt_status init_rank(const nc_hello *first, int n, int rank, int device, int64_t timeout_ms,
                           ncclComm_t *out) {
  static const char op[] = "dt_comm_nccl_create";
  dt_status status = dt__cuda_use_device(op, device);
  if (status != DT_OK) return status;
  ncclConfig_t config = dt__nc_config();
  ncclComm_t c = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&c, n, first->id, rank, &config);
  int64_t deadline = dt__nc_now_ns() + timeout_ms * 1000000LL;
  while (r == ncclInProgress && c && dt__nc_now_ns() < deadline) {
    sched_yield();
    if (ncclCommGetAsyncError(c, &r) != ncclSuccess) break;
  }
  if (r != ncclSuccess) {
    status = dt__error(r == ncclInProgress ? DT_ERR_TIMEOUT : DT_ERR_COMM,
                       "%s: ncclCommInitRankConfig on rank %d of %d (cuda:%d): %s (%.300s)", op,
                       rank, n, device,
                       r == ncclInProgress ? "not ready within the bootstrap group's timeout"
                                           : ncclGetErrorString(r),
                       c ? ncclGetLastError(c) : "");
    if (c) (void)ncclCommAbort(c);
    return status;
  }
  *out = c;
  return DT_OK;
}

dt_status dt_comm_nccl_create(dt_comm *bootstrap, int device, dt_comm **out) {
  static const char op[] = "dt_comm_nccl_create";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  if (!bootstrap) return dt__error(DT_ERR_INVALID, "%s: bootstrap is NULL", op);
  if (device < -1) {
    return dt__error(DT_ERR_INVALID, "%s: device is %d, expected a CUDA device index or -1", op,
                     device);
  }
  int n = bootstrap->size, rank = bootstrap->rank;
  nc_world *first_world = NULL;
  if (rank == 0 && !(first_world = dt__nc_world_new(n))) {
    /* The peers still exchange: they learn of it from rank 0's hello (no unique id). */
  }
  nc_hello hello;
  hello_of(bootstrap, device, first_world, &hello);
  if (rank == 0 && !first_world) {
    hello.id_ok = 0;
    snprintf(hello.reason, NC_REASON, "out of memory");
  }
  dt_objects *all = NULL;
  dt_status status = dt_comm_all_gather_object(bootstrap, &hello, sizeof hello, &all);
  if (status != DT_OK) {
    dt__nc_world_release(first_world, n);
    return status;
  }
  nc_hello *hellos = dt__alloc(sizeof *hellos * (size_t)n);
  int *devices = dt__alloc(sizeof *devices * (size_t)n);
  char message[512] = "";
  if (!hellos || !devices) {
    status = dt__error(DT_ERR_NOMEM, "%s: out of memory", op);
  } else {
    for (int r = 0; r < n && status == DT_OK; r++) {
      if (all->lengths[r] != sizeof *hellos) {
        status = dt__error(DT_ERR_MISMATCH,
                           "%s: rank %d sent %zu bytes, expected %zu (another "
                           "libdtensor build?)",
                           op, r, all->lengths[r], sizeof *hellos);
      } else {
        memcpy(&hellos[r], all->data + all->offsets[r], sizeof *hellos);
      }
    }
  }
  dt__free(all);
  if (status == DT_OK) {
    status = dt__nccl_plan(hellos, n, devices, message, sizeof message);
    if (status != DT_OK) status = dt__error(status, "%s: %s", op, message);
  }
  /* The ranks of rank 0's process share its world; rank 0 gives back the references of the
   * ranks that do not (it made the world with one per rank). */
  nc_world *world = NULL;
  bool shares = hellos && same_process(&hellos[0], &hellos[rank]);
  if (rank == 0) {
    int sharers = 0;
    for (int r = 0; hellos && r < n; r++) sharers += same_process(&hellos[0], &hellos[r]);
    dt__nc_world_release(first_world, hellos ? n - sharers : n - 1);
  }
  if (shares) {
    world = (nc_world *)(uintptr_t)hellos[0].world;
  } else if (status == DT_OK && !(world = dt__nc_world_new(1))) {
    status = dt__error(DT_ERR_NOMEM, "%s: out of memory", op);
  }
  ncclComm_t c = NULL;
  if (status == DT_OK) {
    status = init_rank(&hellos[0], n, rank, devices[rank], bootstrap->timeout_ms, &c);
  }
  if (status == DT_OK) {
    bool watch = bootstrap->backend->is_aborted != NULL;
    *out = dt__nc_wrap(c, devices[rank], world, watch ? bootstrap : NULL, &status);
  }
  if (status == DT_OK) {
    (*out)->timeout_ms = bootstrap->timeout_ms;
    snprintf((*out)->name, sizeof(*out)->name, "nccl(%.40s)", bootstrap->name);
  } else {
    dt__nc_world_release(world, 1);
  }
  dt__free(hellos);
  dt__free(devices);
  return status;
}

dt_status dt__nccl_init(const dt_comm_options *opts, dt_comm **out) {
#ifdef DT_HAVE_MPI
  dt_comm *boot = NULL;
  dt_status status = dt__mpi_init(opts, &boot);
  if (status != DT_OK) return status;
  if (opts->timeout_ms > 0) boot->timeout_ms = opts->timeout_ms;
  status = dt_comm_nccl_create(boot, -1, out);
  if (status != DT_OK) {
    dt__nc_destroy_group(boot);
    return status;
  }
  ((nc_comm *)(*out)->state)->bootstrap = boot;
  return DT_OK;
#else
  (void)opts;
  (void)out;
  return dt__error(DT_ERR_UNSUPPORTED,
                   "dt_comm_init: the nccl backend takes its ranks from an MPI world under mpirun, "
                   "and this libdtensor has no MPI; under dt_comm_spawn call "
                   "dt_comm_nccl_create(world, -1, &group) in every rank");
#endif
}
