/* Which GPU each rank of a new NCCL group takes, decided from what every rank said (its host,
 * its devices' PCI bus ids, the device it asked for). Every rank runs this on the same bytes
 * and reaches the same verdict, so a refusal is returned on every rank before any NCCL call:
 * nobody is left waiting in ncclCommInitRank. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "comm/nccl/nccl_impl.h"

void dt__nc_host_of(nc_hello *h) {
  memset(h->host, 0, sizeof h->host);
  memset(h->boot, 0, sizeof h->boot);
  if (gethostname(h->host, NC_HOST - 1) != 0) snprintf(h->host, NC_HOST, "unknown");
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(h->boot, NC_BOOT, f)) h->boot[0] = 0;
    fclose(f);
    h->boot[strcspn(h->boot, "\n")] = 0;
  }
}

bool dt__nc_same_host(const nc_hello *a, const nc_hello *b) {
  return strncmp(a->host, b->host, NC_HOST) == 0 && strncmp(a->boot, b->boot, NC_BOOT) == 0;
}

dt_status dt__nccl_plan(const nc_hello *h, int n, int *devices, char *message, size_t size) {
  for (int r = 0; r < n; r++) {
    if (h[r].count <= 0) {
      snprintf(message, size, "rank %d (host %.64s) has no CUDA device: %.192s", r, h[r].host,
               h[r].reason[0] ? h[r].reason : "the CUDA runtime reports none");
      return DT_ERR_UNSUPPORTED;
    }
    int device = h[r].requested;
    if (device < 0) {
      device = 0;
      for (int q = 0; q < r; q++) device += dt__nc_same_host(&h[q], &h[r]);
      if (device >= h[r].count) {
        snprintf(message, size,
                 "rank %d is rank %d of host %.64s, which has %d CUDA device%s: NCCL needs one GPU "
                 "per rank and refuses two ranks on one GPU; ranks that share a GPU can use the "
                 "threads backend (dt_comm_spawn) on CUDA tensors",
                 r, device, h[r].host, h[r].count, h[r].count == 1 ? "" : "s");
        return DT_ERR_UNSUPPORTED;
      }
    } else if (device >= h[r].count || device >= NC_MAX_DEVICES) {
      snprintf(message, size, "rank %d asked for cuda:%d but sees %d CUDA device%s", r, device,
               h[r].count, h[r].count == 1 ? "" : "s");
      return DT_ERR_INVALID;
    }
    devices[r] = device;
  }
  /* Two ranks on one GPU: the same host and the same bus id (indexes differ between processes
   * when CUDA_VISIBLE_DEVICES does). */
  for (int r = 0; r < n; r++) {
    for (int q = 0; q < r; q++) {
      if (dt__nc_same_host(&h[q], &h[r]) &&
          strncmp(h[q].bus[devices[q]], h[r].bus[devices[r]], NC_BUS_ID) == 0) {
        snprintf(message, size,
                 "ranks %d and %d would both use the GPU at PCI %.20s on host %.64s (cuda:%d and "
                 "cuda:%d): NCCL refuses two ranks on one GPU; give each rank its own GPU, or "
                 "use the threads backend (dt_comm_spawn) for ranks that share one",
                 q, r, h[r].bus[devices[r]], h[r].host, devices[q], devices[r]);
        return DT_ERR_UNSUPPORTED;
      }
    }
  }
  if (n > 0 && !h[0].id_ok) {
    snprintf(message, size, "rank 0 could not make the group's NCCL unique id: %.192s",
             h[0].reason);
    return DT_ERR_COMM;
  }
  return DT_OK;
}
