/*
 * The NCCL backend's refusals that need no GPU (they run on the CPU machines too): which GPU
 * each rank takes and when NCCL's "two ranks on one GPU" is refused (dt__nccl_plan, on
 * made-up hellos), dt_comm_nccl_create's argument checks, and a world of 2 threads asking for
 * NCCL groups on a machine with fewer than 2 GPUs: every rank is refused, none hangs.
 * Without NCCL in the build it skips (77).
 */
#include <string.h>
#include <unistd.h>

#include "cuda/cuda_test.h"

#ifndef DT_HAVE_NCCL
int main(void) {
  printf("test_cuda_nccl_refusals: skipped: this build has no NCCL backend\n");
  return DT_TEST_SKIP;
}
#else
#include "comm/nccl/nccl_impl.h"

static nc_hello hello(const char *host, int count, int requested, const char *bus0,
                      const char *bus1) {
  nc_hello h;
  memset(&h, 0, sizeof h);
  snprintf(h.host, sizeof h.host, "%s", host);
  h.count = count;
  h.requested = requested;
  h.id_ok = 1;
  if (count == 0) snprintf(h.reason, sizeof h.reason, "no CUDA device (test)");
  snprintf(h.bus[0], NC_BUS_ID, "%s", bus0);
  snprintf(h.bus[1], NC_BUS_ID, "%s", bus1);
  return h;
}

static void plans(void) {
  char message[512];
  int devices[4] = {-9, -9, -9, -9};
  /* Two hosts of one GPU each, devices chosen by the rank's index on its host. */
  nc_hello two_hosts[2] = {hello("a", 1, -1, "0000:01:00.0", ""),
                           hello("b", 1, -1, "0000:01:00.0", "")};
  CHECK(dt__nccl_plan(two_hosts, 2, devices, message, sizeof message) == DT_OK, "%s", message);
  CHECK(devices[0] == 0 && devices[1] == 0, "devices %d %d", devices[0], devices[1]);
  /* One host with two GPUs: ranks 0 and 1 take cuda:0 and cuda:1. */
  nc_hello one_host[3] = {hello("a", 2, -1, "0000:01:00.0", "0000:02:00.0"),
                          hello("a", 2, -1, "0000:01:00.0", "0000:02:00.0"),
                          hello("a", 2, -1, "0000:01:00.0", "0000:02:00.0")};
  CHECK(dt__nccl_plan(one_host, 2, devices, message, sizeof message) == DT_OK, "%s", message);
  CHECK(devices[0] == 0 && devices[1] == 1, "devices %d %d", devices[0], devices[1]);
  /* A third rank on that host has no GPU of its own: refused, naming NCCL's rule. */
  CHECK(dt__nccl_plan(one_host, 3, devices, message, sizeof message) == DT_ERR_UNSUPPORTED, "%s",
        message);
  CHECK(strstr(message, "rank 2") && strstr(message, "refuses two ranks on one GPU") &&
            strstr(message, "threads backend"),
        "%s", message);
  /* Explicit devices naming one GPU twice (same bus id): refused. */
  nc_hello same[2] = {hello("a", 1, 0, "0000:01:00.0", ""), hello("a", 1, 0, "0000:01:00.0", "")};
  CHECK(dt__nccl_plan(same, 2, devices, message, sizeof message) == DT_ERR_UNSUPPORTED, "%s",
        message);
  CHECK(strstr(message, "ranks 0 and 1") && strstr(message, "0000:01:00.0"), "%s", message);
  /* cuda:0 of two processes with different CUDA_VISIBLE_DEVICES: two GPUs, accepted. */
  nc_hello visible[2] = {hello("a", 1, 0, "0000:01:00.0", ""),
                         hello("a", 1, 0, "0000:02:00.0", "")};
  CHECK(dt__nccl_plan(visible, 2, devices, message, sizeof message) == DT_OK, "%s", message);
  /* A rank without a device, a device past the count, rank 0 without a unique id. */
  nc_hello none[2] = {hello("a", 1, -1, "0000:01:00.0", ""), hello("b", 0, -1, "", "")};
  CHECK(dt__nccl_plan(none, 2, devices, message, sizeof message) == DT_ERR_UNSUPPORTED, "%s",
        message);
  CHECK(strstr(message, "rank 1") && strstr(message, "no CUDA device (test)"), "%s", message);
  nc_hello past[1] = {hello("a", 2, 3, "0000:01:00.0", "0000:02:00.0")};
  CHECK(dt__nccl_plan(past, 1, devices, message, sizeof message) == DT_ERR_INVALID, "%s", message);
  CHECK(strstr(message, "cuda:3") && strstr(message, "2 CUDA devices"), "%s", message);
  nc_hello no_id[1] = {hello("a", 1, -1, "0000:01:00.0", "")};
  no_id[0].id_ok = 0;
  CHECK(dt__nccl_plan(no_id, 1, devices, message, sizeof message) == DT_ERR_COMM, "%s", message);
  /* Two machines whose containers share a host name ("localhost"), told apart by the boot id
   * (issue 39 item 2): each rank takes its own machine's cuda:0; with the host name alone the
   * second rank was counted as rank 1 of a one-GPU host and refused. */
  nc_hello twins[2] = {hello("localhost", 1, -1, "0000:01:00.0", ""),
                       hello("localhost", 1, -1, "0000:01:00.0", "")};
  snprintf(twins[0].boot, NC_BOOT, "%s", "11111111-1111-1111-1111-111111111111");
  snprintf(twins[1].boot, NC_BOOT, "%s", "22222222-2222-2222-2222-222222222222");
  devices[0] = devices[1] = -9;
  CHECK(dt__nccl_plan(twins, 2, devices, message, sizeof message) == DT_OK, "%s", message);
  CHECK(devices[0] == 0 && devices[1] == 0, "devices %d %d", devices[0], devices[1]);
  CHECK(!dt__nc_same_host(&twins[0], &twins[1]), "two boot ids are one host");
  /* The same boot id: one machine, and NCCL's rule applies again. */
  snprintf(twins[1].boot, NC_BOOT, "%s", twins[0].boot);
  CHECK(dt__nccl_plan(twins, 2, devices, message, sizeof message) == DT_ERR_UNSUPPORTED, "%s",
        message);
  /* This machine's identity: its host name and the kernel's boot id, as /proc says. */
  nc_hello me;
  memset(&me, 0x7f, sizeof me);
  dt__nc_host_of(&me);
  char name[NC_HOST] = {0}, boot[NC_BOOT] = {0};
  CHECK(gethostname(name, sizeof name - 1) == 0 && strcmp(me.host, name) == 0, "host '%s'",
        me.host);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    CHECK(fgets(boot, sizeof boot, f) != NULL, "reading boot_id");
    fclose(f);
    boot[strcspn(boot, "\n")] = 0;
    CHECK(strlen(me.boot) == 36 && strcmp(me.boot, boot) == 0, "boot '%s' vs '%s'", me.boot, boot);
  } else {
    CHECK(me.boot[0] == 0, "no boot_id, yet boot '%s'", me.boot);
  }
}

static dt_status two_ranks(dt_comm *world, void *arg) {
  int *statuses = arg;
  dt_comm *group = NULL;
  dt_status st = dt_comm_nccl_create(world, -1, &group);
  statuses[dt_comm_rank(world)] = st;
  /* The message names why: no device here, or NCCL's rule on a one-GPU machine. */
  if (st != DT_OK && !strstr(dt_last_error(), "no CUDA device") &&
      !strstr(dt_last_error(), "refuses two ranks on one GPU")) {
    fprintf(stderr, "rank %d: unexpected message: %s\n", dt_comm_rank(world), dt_last_error());
    statuses[dt_comm_rank(world)] = DT_ERR_INTERNAL;
  }
  if (group) dt_comm_destroy(group);
  return DT_OK;
}

int main(void) {
  plans();
  dt_comm *out = (dt_comm *)&out;
  CHECK(dt_comm_nccl_create(NULL, -1, &out) == DT_ERR_INVALID && out == NULL, "NULL bootstrap");
  dt_comm *single = NULL;
  CHECK_OK(dt_comm_init(&(dt_comm_options){.backend = "threads"}, &single));
  CHECK(dt_comm_nccl_create(single, -2, &out) == DT_ERR_INVALID, "device -2: %s", dt_last_error());
  CHECK(dt_comm_nccl_create(single, -1, NULL) == DT_ERR_INVALID, "NULL out");
  dt_comm_destroy(single);

  int gpus = 0;
  (void)dt_cuda_device_count(&gpus);
  if (gpus < 2) {
    int statuses[2] = {99, 99};
    CHECK_OK(dt_comm_spawn(2, two_ranks, statuses));
    CHECK(statuses[0] == DT_ERR_UNSUPPORTED && statuses[1] == DT_ERR_UNSUPPORTED,
          "statuses %d %d (%d GPUs)", statuses[0], statuses[1], gpus);
  }
  return dt_test_result("test_cuda_nccl_refusals");
}
#endif
