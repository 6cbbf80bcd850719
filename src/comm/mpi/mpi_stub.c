/* MPI backend stand-in for builds without MPI: dt_comm_init("mpi") explains itself. */
#ifndef DT_HAVE_MPI

#include "comm/comm_impl.h"

dt_status dt__mpi_init(const dt_comm_options *opts, dt_comm **out) {
  (void)opts;
  (void)out;
  return dt__error(DT_ERR_UNSUPPORTED,
                   "dt_comm_init: backend \"mpi\" is not built into this libdtensor (CMake found "
                   "no MPI, or DT_WITH_MPI=OFF); install an MPI (e.g. Open MPI) and reconfigure, "
                   "or use \"threads\" (dt_spawn) or \"fake\"");
}

#else
typedef int dt__mpi_stub_unused;
#endif /* DT_HAVE_MPI */
