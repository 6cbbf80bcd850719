/* Creating, converting and inspecting distributed tensors. */
#include <inttypes.h>
#include <stdio.h>

#include "distributed/redistribute_impl.h"
#include "profile/profile_impl.h"
#include "tensor/device_impl.h"

static dt_status check_mesh(const char *op, const dt_mesh *mesh) {
  if (!mesh) return dt__error(DT_ERR_INVALID, "%s: mesh is NULL", op);
  if (dt_mesh_ndim(mesh) > DT_MESH_MAX_DIMS) {
    return dt__error(DT_ERR_UNSUPPORTED, "%s: meshes of more than %d dims are not supported", op,
                     DT_MESH_MAX_DIMS);
  }
  return DT_OK;
}

/* This rank's block of a global tensor: shape and offsets. */
static void my_region(const dt_dist_spec *spec, int64_t *shape, int64_t *offset) {
  dt_mesh_info mi;
  dt__mesh_info(spec->mesh, &mi);
  dt__local_region(spec->ndim, spec->shape, spec->mesh_ndim, mi.size, mi.coord, spec->placements,
                   shape, offset);
}

/* dt__check_strided against the sizes of `mesh`. */
static dt_status check_strided_on(const char *op, const dt_mesh *mesh, int ndim,
                                  const int64_t *shape, int n_placements,
                                  const dt_placement *placements) {
  dt_mesh_info mi;
  dt__mesh_info(mesh, &mi);
  return dt__check_strided(op, ndim, shape, n_placements, mi.size, placements);
}

/* A view of `full` restricted to a block. */
static dt_status block_view(const dt_tensor *full, const int64_t *shape, const int64_t *offset,
                            dt_tensor **out) {
  int64_t start = full->offset;
  for (int d = 0; d < full->ndim; d++) start += offset[d] * full->strides[d];
  return dt__tensor_view(full, full->ndim, shape, full->strides, start, out);
}

_Thread_local dt__dist_convert_guard dt__dist_guard;

/* Export's guard (dist_impl.h): nothing unless a trace runs on this thread. */
static dt_status check_guard(const char *op, const dt_tensor *t) {
  if (!dt__dist_guard.check || !t) return DT_OK;
  return dt__dist_guard.check(dt__dist_guard.user, op, t);
}

/* The hint added to errors of tensors whose global shape from_local inferred. */
static bool has_partial(int n, const dt_placement *p) {
  for (int i = 0; i < n; i++) {
    if (p[i].kind == DT_PARTIAL) return true;
  }
  return false;
}

/* Partial(avg) on an integer dtype would divide with truncation at the reduction; PyTorch
 * cannot represent it either. Refused where the placement is given, not at the reduction. */
static dt_status check_partial_avg(const char *op, int n, const dt_placement *p, dt_dtype dtype) {
  if (dt_dtype_is_floating(dtype)) return DT_OK;
  for (int i = 0; i < n; i++) {
    if (p[i].kind == DT_PARTIAL && p[i].op == DT_REDUCE_AVG) {
      return dt__error(DT_ERR_INVALID,
                       "%s: placement %d is Partial(avg) but the tensor's dtype is %s (an average "
                       "needs a floating dtype; use Partial(sum) and divide, or convert first)",
                       op, i, dt_dtype_name(dtype));
    }
  }
  return DT_OK;
}

/* ---- Autograd of the conversions ----------------------------------------------------------
 *
 * The conversions are not ops of the table, so they record themselves as autograd function
 * nodes through dt__upcall.autograd_record_conversion (core/core_impl.h: autograd stands on
 * this layer, so the call goes up through the one struct of upcalls).
 * Each node keeps one spec (retained) that says where the gradient goes back to; the rules
 * are PyTorch's, listed in docs/autograd.md. */

static void spec_state_release(void *state) { dt__spec_release(state); }

/* Where the gradient of a tensor with these placements goes: the same placements, except
 * that a Partial tensor's gradient is Replicate (as in PyTorch: the gradient of each
 * partial term is the whole gradient). */
static void grad_placements(const dt_dist_spec *spec, dt_placement *out) {
  for (int m = 0; m < spec->mesh_ndim; m++) {
    out[m] = spec->placements[m].kind == DT_PARTIAL ? dt_replicate() : spec->placements[m];
  }
}

/* redistribute: the gradient goes back to the input's placements. */
static dt_status redistribute_backward(void *state, dt_tensor *grad, dt_tensor **out) {
  const dt_dist_spec *input = state;
  dt_placement p[DT_MESH_MAX_DIMS];
  grad_placements(input, p);
  return dt_dist_redistribute(grad, input->mesh_ndim, p, out);
}

/* from_local: the gradient is redistributed to the placements given to from_local (the
 * forward's, Partial included: PyTorch's FromLocal), then this rank's shard is the local
 * tensor's gradient. */
static dt_status from_local_backward(void *state, dt_tensor *grad, dt_tensor **out) {
  dt_dist_spec *output = state;
  dt_tensor *moved = NULL;
  dt_status st = dt_dist_redistribute(grad, output->mesh_ndim, output->placements, &moved);
  if (!st) st = dt_dist_to_local(moved, out);
  dt_tensor_release(moved);
  return st;
}

/* to_local: the local gradient is this rank's shard of a gradient with the forward's
 * placements and global shape (PyTorch's grad_placements default). */
static dt_status to_local_backward(void *state, dt_tensor *grad, dt_tensor **out) {
  dt_dist_spec *input = state;
  dt_dist_from_local_options options = {.global_shape = input->shape, .global_ndim = input->ndim};
  return dt_dist_from_local(input->mesh, grad, input->mesh_ndim, input->placements, &options, out);
}

/* full_tensor (redistribute to Replicate, then to_local): the local gradient is a Replicate
 * gradient, which goes back to the input's placements (a Shard input takes its chunk, a
 * Partial one gets it Replicate). */
static dt_status full_tensor_backward(void *state, dt_tensor *grad, dt_tensor **out) {
  dt_dist_spec *input = state;
  dt_placement replicated[DT_MESH_MAX_DIMS], p[DT_MESH_MAX_DIMS];
  for (int m = 0; m < input->mesh_ndim; m++) replicated[m] = dt_replicate();
  grad_placements(input, p);
  dt_dist_from_local_options options = {.global_shape = input->shape, .global_ndim = input->ndim};
  dt_tensor *whole = NULL;
  dt_status st =
      dt_dist_from_local(input->mesh, grad, input->mesh_ndim, replicated, &options, &whole);
  if (!st) st = dt_dist_redistribute(whole, input->mesh_ndim, p, out);
  dt_tensor_release(whole);
  return st;
}

static const dt_autograd_function redistribute_function = {.name = "dt_dist_redistribute",
                                                           .backward = redistribute_backward,
                                                           .release = spec_state_release};
static const dt_autograd_function from_local_function = {
    .name = "dt_dist_from_local", .backward = from_local_backward, .release = spec_state_release};
static const dt_autograd_function to_local_function = {
    .name = "dt_dist_to_local", .backward = to_local_backward, .release = spec_state_release};
static const dt_autograd_function full_tensor_function = {
    .name = "dt_dist_full_tensor", .backward = full_tensor_backward, .release = spec_state_release};

/* After a conversion made *out from input (st is its status): records it when input requires
 * grad and grad mode is on. A failure releases *out, so the caller returns the status. */
static dt_status record_conversion(dt_status st, const dt_autograd_function *fn, dt_dist_spec *spec,
                                   dt_tensor *input, dt_tensor **out) {
  /* A tensor without autograd state does not require grad, and the entry is installed
   * before any tensor gets state. */
  if (st || !input->autograd || !dt__upcall.autograd_record_conversion) return st;
  st = dt__upcall.autograd_record_conversion(fn, spec, input, *out);
  if (st) {
    dt_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

/* The checks shared by from_local and distribute_tensor: a valid mesh, a local tensor t
 * (named `what` in the message), placements valid for the mesh and t (normalized into norm). */
static dt_status check_to_distribute(const char *op, dt_mesh *mesh, const dt_tensor *t,
                                     const char *what, int n_placements,
                                     const dt_placement *placements, dt_placement *norm) {
  dt_status st = check_mesh(op, mesh);
  if (st) return st;
  if (!t) return dt__error(DT_ERR_INVALID, "%s: %s is NULL", op, what);
  if (t->spec) return dt__error(DT_ERR_INVALID, "%s: the tensor is already distributed", op);
  uint32_t want = dt__device_key(dt_mesh_device(mesh));
  if (DT_UNLIKELY(t->storage->device != want)) {
    char dev[48], m[96], mine[48];
    return dt__error(DT_ERR_INVALID,
                     "%s: the %s is on %s but %s is a %s mesh whose device on this rank is %s; "
                     "move it with dt_to_device first",
                     op, what, dt__device_key_format(t->storage->device, dev, sizeof dev),
                     dt_mesh_format(mesh, m, sizeof m),
                     dt_device_kind_name((int)dt_mesh_device_kind(mesh)),
                     dt__device_key_format(want, mine, sizeof mine));
  }
  dt__dist_init();
  return dt__check_placements(op, dt_mesh_ndim(mesh), t->ndim, n_placements, placements, norm);
}

dt_status dt_dist_from_local(dt_mesh *mesh, dt_tensor *local, int n_placements,
                             const dt_placement *placements,
                             const dt_dist_from_local_options *options, dt_tensor **out) {
  const char *op = "dt_dist_from_local";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  dt_placement norm[DT_MESH_MAX_DIMS];
  dt_status st =
      check_to_distribute(op, mesh, local, "local tensor", n_placements, placements, norm);
  if (!st) st = check_partial_avg(op, n_placements, norm, local->dtype);
  if (st) return st;
  dt_mesh_info mi;
  dt__mesh_info(mesh, &mi);
  int64_t global[DT_MAX_DIMS];
  if (options && options->global_shape) {
    if (options->global_ndim != local->ndim) {
      return dt__error(DT_ERR_INVALID, "%s: global shape has %d dims but the local tensor has %d",
                       op, options->global_ndim, local->ndim);
    }
    memcpy(global, options->global_shape, sizeof(int64_t) * (size_t)local->ndim);
    st = dt__check_shape(op, local->ndim, global);
    if (st) return st;
  } else {
    memcpy(global, local->shape, sizeof global);
    for (int m = 0; m < mi.ndim; m++) {
      if (dt__is_sharding(norm[m])) global[norm[m].dim] *= mi.size[m];
    }
  }
  st = dt__check_strided(op, local->ndim, global, mi.ndim, mi.size, norm);
  if (st) return st;
  int64_t expect[DT_MAX_DIMS], offset[DT_MAX_DIMS];
  dt__local_region(local->ndim, global, mi.ndim, mi.size, mi.coord, norm, expect, offset);
  bool fits = memcmp(expect, local->shape, sizeof(int64_t) * (size_t)local->ndim) == 0;
  st = check_guard(op, local);
  if (st) return st;
  if (options && options->run_check) {
    /* Every rank takes part in the check, a misfit one too, so all fail together. */
    st = dt__from_local_check(mesh, local, norm, global, fits);
    if (st && !(options && options->global_shape)) return dt__dist_add_inferred_hint(st);
    if (st) return st;
  }
  if (!fits) {
    char a[160], b[160], g[160];
    bool given = options && options->global_shape;
    /* Without global_shape the global shape is a guess (even shards): say so, since uneven
     * shards are the usual cause and the option is the cure. */
    return dt__error(DT_ERR_INVALID,
                     "%s: local shape %s does not fit global shape %s on this rank (expected %s)%s",
                     op, dt__format_ints(a, sizeof a, local->ndim, local->shape),
                     dt__format_ints(g, sizeof g, local->ndim, global),
                     dt__format_ints(b, sizeof b, local->ndim, expect),
                     given ? "" : dt__dist_inferred_hint);
  }
  dt_dist_spec *spec = NULL;
  st = dt__spec_create(mesh, norm, local->ndim, global, local->dtype, &spec);
  if (st) return st;
  spec->shape_inferred = !(options && options->global_shape);
  st = dt__dist_wrap(local, spec, out);
  st = record_conversion(st, &from_local_function, spec, local, out);
  dt__spec_release(spec);
  return st;
}

dt_status dt_dist_distribute_tensor(dt_mesh *mesh, dt_tensor *full, int n_placements,
                                    const dt_placement *placements, dt_tensor **out) {
  const char *op = "dt_dist_distribute_tensor";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  dt_placement norm[DT_MESH_MAX_DIMS];
  dt_status st = check_to_distribute(op, mesh, full, "tensor", n_placements, placements, norm);
  if (st) return st;
  if (has_partial(n_placements, norm)) {
    return dt__error(
        DT_ERR_INVALID,
        "%s: Partial placements cannot be distributed (use Replicate, then redistribute)", op);
  }
  st = check_strided_on(op, mesh, full->ndim, full->shape, n_placements, norm);
  if (!st) st = check_guard(op, full);
  if (st) return st;
  dt_dist_spec *spec = NULL;
  st = dt__spec_create(mesh, norm, full->ndim, full->shape, full->dtype, &spec);
  if (st) return st;
  /* The block of the box placements (a StridedShard and the Shards of its dim after it taken
   * as Replicate), then in mesh-dim order each StridedShard's chunks of its blocks and the
   * later Shards' chunks of what it left (the outer form). */
  dt_mesh_info mi;
  dt__mesh_info(mesh, &mi);
  dt_placement boxed[DT_MESH_MAX_DIMS];
  bool after_strided[DT_MESH_MAX_DIMS] = {false};
  for (int m = 0; m < n_placements; m++) {
    for (int j = 0; j < m; j++) {
      after_strided[m] |= norm[m].kind == DT_SHARD && norm[j].kind == DT_STRIDED_SHARD &&
                          norm[j].dim == norm[m].dim;
    }
    boxed[m] = norm[m].kind == DT_STRIDED_SHARD || after_strided[m] ? dt_replicate() : norm[m];
  }
  int64_t shape[DT_MAX_DIMS], offset[DT_MAX_DIMS];
  dt__local_region(full->ndim, full->shape, mi.ndim, mi.size, mi.coord, boxed, shape, offset);
  dt_tensor *view = NULL, *local = NULL;
  st = block_view(full, shape, offset, &view);
  for (int m = 0; m < n_placements && !st; m++) {
    dt_tensor *sliced = NULL;
    if (norm[m].kind == DT_STRIDED_SHARD) {
      st = dt__strided_slice(view, norm[m].dim, norm[m].split_factor, (int)mi.size[m],
                             (int)mi.coord[m], &sliced);
    } else if (after_strided[m]) {
      int d = norm[m].dim;
      int64_t start, length;
      memcpy(shape, view->shape, sizeof(int64_t) * (size_t)full->ndim);
      memset(offset, 0, sizeof(int64_t) * (size_t)full->ndim);
      dt__chunk_range(view->shape[d], mi.size[m], mi.coord[m], &start, &length);
      offset[d] = start, shape[d] = length;
      st = block_view(view, shape, offset, &sliced);
    } else {
      continue;
    }
    dt_tensor_release(view);
    view = sliced;
  }
  if (!st) memcpy(shape, view->shape, sizeof(int64_t) * (size_t)full->ndim);
  if (!st) st = dt__dist_new_like(full, full->ndim, shape, full->dtype, &local);
  if (!st) st = dt__dist_copy(local, view);
  if (!st) {
    st = dt__dist_wrap(local, spec, out);
    /* As PyTorch's: the distributed copy is a new leaf that requires grad when the source
     * does (a parameter distributed once is the leaf its optimizer updates); no gradient
     * flows back to the local source. */
    if (!st && full->autograd && dt__upcall.autograd_copy_requires_grad) {
      st = dt__upcall.autograd_copy_requires_grad(full, *out);
      if (st) {
        dt_tensor_release(*out);
        *out = NULL;
      }
    }
  }
  dt_tensor_release(view);
  dt_tensor_release(local);
  dt__spec_release(spec);
  return st;
}

/* Broadcasts one int from src, through the mesh's device (an NCCL group moves only its GPU's
 * memory; the threads and MPI backends take either). */
static dt_status broadcast_flag(dt_comm *world, dt_device device, int32_t *value, int src) {
  dt_tensor *flag = NULL, *host = NULL;
  int64_t one = 1;
  dt_status st = dt__tensor_new(1, &one, DT_I32, &host);
  if (st) return st;
  *(int32_t *)dt__tensor_base(host) = *value;
  if (device.kind == DT_DEVICE_CPU) {
    flag = dt_tensor_retain(host);
  } else {
    st = dt__tensor_new_on(device, 1, &one, DT_I32, &flag);
    if (!st) st = dt__dist_from_host(flag, host);
  }
  if (!st) st = dt_comm_broadcast(world, flag, src);
  if (!st && flag != host) {
    st = dt__device_copy(DT_DEVICE_CPU_VALUE, dt__tensor_base(host), device, dt__tensor_base(flag),
                         sizeof(int32_t));
  }
  if (!st) *value = *(int32_t *)dt__tensor_base(host);
  dt_tensor_release(flag);
  dt_tensor_release(host);
  return st;
}

dt_status dt_dist_distribute_tensor_from(dt_mesh *mesh, dt_tensor *full, int src, int ndim,
                                         const int64_t *shape, dt_dtype dtype, int n_placements,
                                         const dt_placement *placements, dt_tensor **out) {
  const char *op = "dt_dist_distribute_tensor_from";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  dt_status st = check_mesh(op, mesh);
  if (st) return st;
  dt_comm *world = dt_mesh_world(mesh);
  if (src < 0 || src >= dt_comm_size(world)) {
    return dt__error(DT_ERR_INVALID, "%s: source rank %d is outside the mesh's %d ranks", op, src,
                     dt_comm_size(world));
  }
  st = dt__check_shape(op, ndim, shape);
  if (st) return st;
  if (!dt__dtype_valid(dtype))
    return dt__error(DT_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dtype);
  dt_placement norm[DT_MESH_MAX_DIMS];
  st = dt__check_placements(op, dt_mesh_ndim(mesh), ndim, n_placements, placements, norm);
  if (st) return st;
  if (has_partial(n_placements, norm)) {
    return dt__error(
        DT_ERR_INVALID,
        "%s: Partial placements cannot be distributed (use Replicate, then redistribute)", op);
  }
  bool is_src = dt_comm_rank(world) == src;
  /* The source checks its tensor, then tells everyone: a bad tensor on the source fails
   * every rank together instead of leaving the others waiting for its data. source_ok is 1
   * for a good tensor, 0 for a bad one, 2 when a trace on the source refuses it. */
  int32_t source_ok = 1;
  char reason[256] = "";
  if (is_src) {
    if (!full) {
      source_ok = 0;
      snprintf(reason, sizeof reason, "tensor is NULL on the source rank");
    } else if (full->ndim != ndim || full->dtype != dtype ||
               memcmp(full->shape, shape, sizeof(int64_t) * (size_t)ndim)) {
      char a[160], b[160];
      source_ok = 0;
      snprintf(reason, sizeof reason, "source tensor %s %s differs from the declared %s %s",
               dt__format_ints(a, sizeof a, full->ndim, full->shape), dt_dtype_name(full->dtype),
               dt__format_ints(b, sizeof b, ndim, shape), dt_dtype_name(dtype));
    } else if (dt__device_key(dt_mesh_device(mesh)) != dt__tensor_device_key(full)) {
      char have[48], want[48];
      source_ok = 0;
      snprintf(reason, sizeof reason, "source tensor is on %s, but the mesh's device on it is %s",
               dt__device_key_format(dt__tensor_device_key(full), have, sizeof have),
               dt__device_key_format(dt__device_key(dt_mesh_device(mesh)), want, sizeof want));
    } else if (check_guard(op, full)) {
      source_ok = 2;
      snprintf(reason, sizeof reason, "%s", dt_last_error());
    }
  }
  st = broadcast_flag(world, dt_mesh_device(mesh), &source_ok, src);
  if (st) return st;
  if (source_ok == 2) {
    return dt__error(DT_ERR_UNSUPPORTED, "%s: source rank %d: %s", op, src,
                     is_src ? reason : "export refused to trace the conversion of a traced value");
  }
  if (!source_ok) {
    return dt__error(DT_ERR_INVALID, "%s: source rank %d: %s", op, src,
                     is_src ? reason : "its tensor does not match the declared shape and dtype");
  }
  /* Broadcast the whole tensor, then keep the local block: simple, and the bytes moved are
   * what a scatter of replicated placements would move. */
  dt_tensor *buffer = NULL;
  st = dt__tensor_new_on(dt_mesh_device(mesh), ndim, shape, dtype, &buffer);
  if (st) return st;
  if (is_src) st = dt__dist_copy(buffer, full);
  if (!st) st = dt_comm_broadcast(world, buffer, src);
  if (!st) st = dt_dist_distribute_tensor(mesh, buffer, n_placements, placements, out);
  dt_tensor_release(buffer);
  return st;
}

dt_status dt_dist_to_local(dt_tensor *t, dt_tensor **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_dist_to_local: out is NULL");
  *out = NULL;
  if (!t) return dt__error(DT_ERR_INVALID, "dt_dist_to_local: tensor is NULL");
  /* A local tensor here is almost always a mix-up (PyTorch has no to_local on a plain
   * tensor): say so rather than hand back a view that hides it. */
  if (!t->spec) return dt__error(DT_ERR_INVALID, "dt_dist_to_local: the tensor is not distributed");
  dt_status st = check_guard("dt_dist_to_local", t);
  if (st) return st;
  st = dt__local_view(t, out);
  return record_conversion(st, &to_local_function, t->spec, t, out);
}

dt_status dt_dist_redistribute(dt_tensor *t, int n_placements, const dt_placement *placements,
                               dt_tensor **out) {
  const char *op = "dt_dist_redistribute";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  if (!t || !t->spec)
    return dt__error(DT_ERR_INVALID, "%s: %s", op,
                     t ? "the tensor is not distributed" : "tensor is NULL");
  dt_placement norm[DT_MESH_MAX_DIMS];
  dt_status st =
      dt__check_placements(op, t->spec->mesh_ndim, t->spec->ndim, n_placements, placements, norm);
  if (!st) st = check_partial_avg(op, n_placements, norm, t->spec->dtype);
  if (!st)
    st = check_strided_on(op, t->spec->mesh, t->spec->ndim, t->spec->shape, n_placements, norm);
  if (st) return st;
  st = check_guard(op, t);
  if (st) return st;
  dt_tensor *local = NULL;
  st = dt__redistribute_local(t, t->spec, norm, &local);
  if (st) return st;
  dt_dist_spec *spec = NULL;
  st = dt__spec_create(t->spec->mesh, norm, t->spec->ndim, t->spec->shape, t->spec->dtype, &spec);
  if (!st) spec->shape_inferred = t->spec->shape_inferred;
  if (!st) {
    if (local == t) {
      st = dt__dist_wrap(local, spec, out); /* a new handle with the new spec */
    } else {
      local->spec = dt__spec_retain(spec); /* fresh from the executor, or a view: ours */
      *out = local;
      local = NULL;
    }
  }
  dt_tensor_release(local);
  dt__spec_release(spec);
  return record_conversion(st, &redistribute_function, t->spec, t, out);
}

dt_status dt_dist_full_tensor(dt_tensor *t, dt_tensor **out) {
  const char *op = "dt_dist_full_tensor";
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  if (!t) return dt__error(DT_ERR_INVALID, "%s: tensor is NULL", op);
  if (!t->spec) return dt__error(DT_ERR_INVALID, "%s: the tensor is not distributed", op);
  dt_status st = check_guard(op, t);
  if (st) return st;
  dt_placement replicated[DT_MESH_MAX_DIMS];
  for (int m = 0; m < t->spec->mesh_ndim; m++) replicated[m] = dt_replicate();
  dt_tensor *local = NULL;
  st = dt__redistribute_local(t, t->spec, replicated, &local);
  if (st) return st;
  st = dt__local_view(local, out);
  dt_tensor_release(local);
  return record_conversion(st, &full_tensor_function, t->spec, t, out);
}

dt_status dt_dist_redistribute_explain(const dt_tensor *t, int n_placements,
                                       const dt_placement *placements, char *buf, size_t size,
                                       int64_t *bytes) {
  const char *op = "dt_dist_redistribute_explain";
  if (!t || !t->spec || !buf || size == 0) {
    return dt__error(DT_ERR_INVALID, "%s: needs a distributed tensor and a buffer", op);
  }
  dt_placement norm[DT_MESH_MAX_DIMS];
  dt_status st =
      dt__check_placements(op, t->spec->mesh_ndim, t->spec->ndim, n_placements, placements, norm);
  if (!st)
    st = check_strided_on(op, t->spec->mesh, t->spec->ndim, t->spec->shape, n_placements, norm);
  if (st) return st;
  dt_redistribute_plan plan;
  st = dt__redistribute_plan_cached(t->spec, norm, &plan);
  if (st) return st;
  dt__redistribute_exact_bytes(t->spec, &plan);
  dt__redistribute_plan_format(&plan, buf, size);
  if (bytes) *bytes = plan.bytes;
  return DT_OK;
}

/* ---- Factories ---------------------------------------------------------------------------- */

typedef enum factory_kind {
  FACTORY_FULL,
  FACTORY_UNIFORM,
  FACTORY_NORMAL,
  FACTORY_ARANGE
} factory_kind;

/* This rank's block (lshape at offset of the global shape) of a factory's tensor, on the
 * mesh's device. Arange and random blocks are made on the host (Philox by global index, so
 * the values do not depend on the mesh) and copied to a device mesh's device. */
static dt_status factory_local(const char *op, const dt_mesh *mesh, factory_kind kind, double value,
                               double step, uint64_t seed, int ndim, const int64_t *shape,
                               const int64_t *lshape, const int64_t *offset, dt_dtype dtype,
                               dt_tensor **out) {
  dt_device device = dt_mesh_device(mesh);
  if (kind == FACTORY_FULL && device.kind == DT_DEVICE_CPU) {
    return dt_full(ndim, lshape, value, dtype, out);
  }
  dt_tensor *host = NULL, *local = NULL;
  dt_status st = DT_OK;
  if (kind == FACTORY_FULL) {
    st = dt__check_fill_value(op, value, dtype);
    if (!st) st = dt__tensor_new_on(device, ndim, lshape, dtype, &local);
    if (!st) st = dt__dist_fill(local, value);
  } else {
    st = dt__tensor_new(ndim, lshape, dtype, &host);
    if (!st && kind == FACTORY_ARANGE) {
      dt__arange_fill(host, value, step, offset[0]);
    } else if (!st) {
      st = dt__random_fill_block(host,
                                 kind == FACTORY_UNIFORM ? DT_RANDOM_UNIFORM : DT_RANDOM_NORMAL,
                                 0.0, 1.0, seed, ndim, shape, offset);
    }
    if (!st && device.kind == DT_DEVICE_CPU) {
      local = dt_tensor_retain(host);
    } else if (!st) {
      st = dt__tensor_new_on(device, ndim, lshape, dtype, &local);
      if (!st) st = dt__dist_from_host(local, host);
    }
  }
  dt_tensor_release(host);
  if (!st) {
    *out = local;
  } else {
    dt_tensor_release(local);
  }
  return st;
}

static dt_status dist_factory(const char *op, dt_mesh *mesh, int ndim, const int64_t *shape,
                              dt_dtype dtype, factory_kind kind, double value, uint64_t seed,
                              int n_placements, const dt_placement *placements, dt_tensor **out,
                              double step) {
  if (!out) return dt__error(DT_ERR_INVALID, "%s: out is NULL", op);
  *out = NULL;
  dt_status st = check_mesh(op, mesh);
  if (!st) st = dt__check_shape(op, ndim, shape);
  if (st) return st;
  if (!dt__dtype_valid(dtype))
    return dt__error(DT_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dtype);
  if ((kind == FACTORY_UNIFORM || kind == FACTORY_NORMAL) && !dt_dtype_is_floating(dtype)) {
    return dt__error(DT_ERR_DTYPE, "%s: needs a floating dtype, got %s", op, dt_dtype_name(dtype));
  }
  dt__dist_init();
  dt_placement norm[DT_MESH_MAX_DIMS];
  st = dt__check_placements(op, dt_mesh_ndim(mesh), ndim, n_placements, placements, norm);
  if (st) return st;
  if (has_partial(n_placements, norm)) {
    return dt__error(DT_ERR_INVALID,
                     "%s: factories take Shard or Replicate placements, not Partial", op);
  }
  st = check_strided_on(op, mesh, ndim, shape, n_placements, norm);
  if (st) return st;
  for (int m = 0; m < n_placements && kind != FACTORY_FULL; m++) {
    if (norm[m].kind == DT_STRIDED_SHARD) {
      return dt__error(DT_ERR_UNSUPPORTED,
                       "%s: placement %d is a StridedShard, which random and arange factories "
                       "do not make; create it Shard or Replicate and redistribute",
                       op, m);
    }
  }
  dt_dist_spec *spec = NULL;
  st = dt__spec_create(mesh, norm, ndim, shape, dtype, &spec);
  if (st) return st;
  int64_t lshape[DT_MAX_DIMS], offset[DT_MAX_DIMS];
  my_region(spec, lshape, offset);
  dt_tensor *local = NULL;
  st = factory_local(op, mesh, kind, value, step, seed, ndim, shape, lshape, offset, dtype, &local);
  if (!st) {
    local->spec = dt__spec_retain(spec);
    *out = local;
  } else {
    dt_tensor_release(local);
  }
  dt__spec_release(spec);
  return st;
}

dt_status dt_dist_constant(dt_mesh *mesh, int ndim, const int64_t *shape, double value,
                           dt_dtype dtype, int n_placements, const dt_placement *placements,
                           dt_tensor **out) {
  return dist_factory("dt_dist_constant", mesh, ndim, shape, dtype, FACTORY_FULL, value, 0,
                      n_placements, placements, out, 0.0);
}
dt_status dt_dist_zeros(dt_mesh *mesh, int ndim, const int64_t *shape, dt_dtype dtype,
                        int n_placements, const dt_placement *placements, dt_tensor **out) {
  return dist_factory("dt_dist_zeros", mesh, ndim, shape, dtype, FACTORY_FULL, 0.0, 0, n_placements,
                      placements, out, 0.0);
}
dt_status dt_dist_ones(dt_mesh *mesh, int ndim, const int64_t *shape, dt_dtype dtype,
                       int n_placements, const dt_placement *placements, dt_tensor **out) {
  return dist_factory("dt_dist_ones", mesh, ndim, shape, dtype, FACTORY_FULL, 1.0, 0, n_placements,
                      placements, out, 0.0);
}
dt_status dt_dist_rand(dt_mesh *mesh, int ndim, const int64_t *shape, dt_dtype dtype, uint64_t seed,
                       int n_placements, const dt_placement *placements, dt_tensor **out) {
  return dist_factory("dt_dist_rand", mesh, ndim, shape, dtype, FACTORY_UNIFORM, 0.0, seed,
                      n_placements, placements, out, 0.0);
}
dt_status dt_dist_randn(dt_mesh *mesh, int ndim, const int64_t *shape, dt_dtype dtype,
                        uint64_t seed, int n_placements, const dt_placement *placements,
                        dt_tensor **out) {
  return dist_factory("dt_dist_randn", mesh, ndim, shape, dtype, FACTORY_NORMAL, 0.0, seed,
                      n_placements, placements, out, 0.0);
}

dt_status dt_dist_arange(dt_mesh *mesh, double start, double end, double step, dt_dtype dtype,
                         int n_placements, const dt_placement *placements, dt_tensor **out) {
  if (!out) return dt__error(DT_ERR_INVALID, "dt_dist_arange: out is NULL");
  *out = NULL;
  int64_t n = 0;
  dt_status st = dt__arange_count("dt_dist_arange", start, end, step, dtype, &n);
  if (st) return st;
  return dist_factory("dt_dist_arange", mesh, 1, &n, dtype, FACTORY_ARANGE, start, 0, n_placements,
                      placements, out, step);
}

dt_status dt_is_same_size(const dt_tensor *a, const dt_tensor *b, bool *same) {
  if (!a || !b || !same) return dt__error(DT_ERR_INVALID, "is_same_size: NULL argument");
  /* The fields directly (the accessors are calls); a tracer still hears of both reads. */
  if (DT_UNLIKELY(dt__size_reader.read != NULL)) {
    dt__size_read(a, -1, "dt_dist_global_shape");
    dt__size_read(b, -1, "dt_dist_global_shape");
  }
  int na = a->spec ? a->spec->ndim : a->ndim, nb = b->spec ? b->spec->ndim : b->ndim;
  const int64_t *sa = a->spec ? a->spec->shape : a->shape;
  const int64_t *sb = b->spec ? b->spec->shape : b->shape;
  bool equal = na == nb;
  for (int i = 0; equal && i < na; i++) equal = sa[i] == sb[i];
  *same = equal;
  return DT_OK;
}
