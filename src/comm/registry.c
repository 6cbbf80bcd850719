/* The backend registry: the one place that names the backends. dt_comm_init looks a backend
 * up here by name; a new backend is one line in the table plus its folder. */
#include <stdio.h>
#include <string.h>

#include "comm/comm_impl.h"

static const struct {
  const char *name;
  dt_comm_backend_init_fn init;
} backends[] = {
    {"threads", dt__threads_init_single},
    {"fake", dt__fake_init},
#ifdef DT_HAVE_MPI
    {"mpi", dt__mpi_init},
#endif
#ifdef DT_HAVE_NCCL
    {"nccl", dt__nccl_init},
#endif
};

/* Backends this project has but a build may leave out, so that asking for one says so. */
static const char *const optional_backends[] = {"mpi", "nccl"};

dt_comm_backend_init_fn dt__comm_backend_find(const char *name, bool *known_unbuilt) {
  *known_unbuilt = false;
  for (size_t i = 0; i < sizeof backends / sizeof *backends; i++) {
    if (strcmp(backends[i].name, name) == 0) return backends[i].init;
  }
  for (size_t i = 0; i < sizeof optional_backends / sizeof *optional_backends; i++) {
    if (strcmp(optional_backends[i], name) == 0) *known_unbuilt = true;
  }
  return NULL;
}

void dt__comm_backend_names(char *buf, size_t size) {
  size_t n = sizeof backends / sizeof *backends;
  buf[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    size_t used = strlen(buf);
    snprintf(buf + used, size - used, "%s\"%s\"",
             i == 0       ? ""
             : i + 1 == n ? " or "
                          : ", ",
             backends[i].name);
  }
}

#ifndef DT_HAVE_NCCL
dt_status dt_comm_nccl_create(dt_comm *bootstrap, int device, dt_comm **out) {
  (void)bootstrap;
  (void)device;
  if (out) *out = NULL;
  return dt__error(DT_ERR_UNSUPPORTED,
                   "dt_comm_nccl_create: this libdtensor has no NCCL backend (build with "
                   "-DDT_WITH_CUDA=ON where CMake finds nccl.h and libnccl)");
}
#endif
