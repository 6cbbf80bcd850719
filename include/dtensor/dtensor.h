/*
 * libdtensor — distributed tensors for C. The umbrella header: include this one.
 *
 *   core.h    status codes, dt_last_error(), allocator and log hooks
 *   tensor.h  dtypes, the dt_tensor handle, creation, random numbers, element access
 *   ops.h     every op (pointwise, reductions, matrix, nn, views), local or distributed
 *   profile.h profiler: Chrome traces of every rank, utilization analysis of any trace
 */
#ifndef DTENSOR_DTENSOR_H
#define DTENSOR_DTENSOR_H

#include "dtensor/core.h"
#include "dtensor/ops.h"
#include "dtensor/profile.h"
#include "dtensor/tensor.h"

#endif /* DTENSOR_DTENSOR_H */
