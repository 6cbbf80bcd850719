/*
 * libdtensor — distributed tensors for C. The umbrella header: include this one.
 *
 *   core.h    status codes, dt_last_error(), allocator and log hooks
 *   tensor.h  dtypes, the dt_tensor handle, creation, random numbers, element access
 *   ops.h     every op (pointwise, reductions, matrix, nn, views), local or distributed
 *   comm.h    process groups (threads, mpi, fake backends), collectives, async work handles
 *   mesh.h    device mesh: N-D grid of ranks, named dimensions, one group per dimension
 *   dist.h    distributed tensors: placements, redistribution, distributed factories
 *   mode.h    dispatch modes: callbacks around every op call
 *   profile.h profiler: per-rank event recording, Chrome trace export
 *   trace.h   trace analysis: read any Chrome trace, utilization, SVG timeline
 *   graph.h   models as graphs: IR, text format, interpreter, export by tracing
 *   nn.h      modules (Linear, Sequential, LayerNorm, ...) with PyTorch FQNs
 *   parallel.h tensor parallelism: plans, parallelize_module, the TP graph transformation
 *   autograd.h reverse-mode gradients: requires_grad, backward, no_grad
 *   loss.h    mse_loss, cross_entropy (vocabulary-parallel on class-sharded logits)
 *   optim.h   SGD, Adam, AdamW, zero_grad, clip_grad_norm
 *   compile.h dt_compile: trace a function once, run it at every size (guards, variants)
 *   checkpoint.h safetensors files, state dicts, distributed checkpoints, DLPack
 */
#ifndef DTENSOR_DTENSOR_H
#define DTENSOR_DTENSOR_H

#include "dtensor/autograd.h"
#include "dtensor/checkpoint.h"
#include "dtensor/comm.h"
#include "dtensor/compile.h"
#include "dtensor/core.h"
#include "dtensor/cuda.h"
#include "dtensor/dist.h"
#include "dtensor/graph.h"
#include "dtensor/loss.h"
#include "dtensor/mesh.h"
#include "dtensor/mode.h"
#include "dtensor/models.h"
#include "dtensor/nn.h"
#include "dtensor/transformer.h"
#include "dtensor/ops.h"
#include "dtensor/optim.h"
#include "dtensor/profile.h"
#include "dtensor/trace.h"
#include "dtensor/parallel.h"
#include "dtensor/pipeline.h"
#include "dtensor/tensor.h"

#endif /* DTENSOR_DTENSOR_H */
