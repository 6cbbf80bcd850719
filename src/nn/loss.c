/*
 * The public losses (include/dtensor/loss.h): mse_loss and cross_entropy, written with ops so
 * that autograd records them and distributed tensors go through ordinary distributed dispatch.
 * They sit in nn, above distributed and autograd, because the vocabulary-parallel path
 * distributes the class ids and computes them with grad mode off; the cross_entropy_loss op
 * itself is in src/ops/loss.c.
 */
#include <math.h>

#include "autograd/size_note.h"
#include "distributed/dist_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/dist.h"
#include "dtensor/loss.h"
#include "dtensor/mesh.h"
#include "kernels/cpu/loss.h"
#include "ops/loss_impl.h"

/* Read from the fields, not through dt_tensor_shape: the count goes to a tracer as a symbolic
 * size (the size note below), so it must not specialize the dims (tensor/tensor_impl.h:
 * dt__size_read). */
static const int64_t *global_shape(const dt_tensor *t) {
  return t->spec ? t->spec->shape : t->shape;
}

static int global_ndim(const dt_tensor *t) {
  return dt_tensor_is_distributed(t) ? dt_dist_ndim(t) : dt_tensor_ndim(t);
}

/* A distributed argument with a local one (other than a 0-d scalar) or with one on another
 * mesh object would fail deep inside the first op (sub.Tensor, eq.Tensor); checked up front so
 * that the message names the public function and both arguments. */
static dt_status check_meshes(const char *fn, const char *a_name, dt_tensor *a, const char *b_name,
                              dt_tensor *b) {
  bool da = dt_tensor_is_distributed(a), db = dt_tensor_is_distributed(b);
  if (da && db && dt_dist_mesh(a) != dt_dist_mesh(b)) {
    return dt__error(DT_ERR_INVALID,
                     "%s: %s and %s lie on different mesh objects (distribute both on one mesh)",
                     fn, a_name, b_name);
  }
  if (da != db && dt_tensor_ndim(da ? b : a) > 0) {
    return dt__error(DT_ERR_INVALID,
                     "%s: %s is %s but %s is %s (distribute both on one mesh, or neither)", fn,
                     a_name, da ? "distributed" : "local", b_name, db ? "distributed" : "local");
  }
  return DT_OK;
}

static dt_status check_reduction(const char *fn, dt_loss_reduction r) {
  if (r == DT_LOSS_MEAN || r == DT_LOSS_SUM || r == DT_LOSS_NONE) return DT_OK;
  return dt__error(DT_ERR_INVALID, "%s: reduction %d is not DT_LOSS_MEAN, _SUM or _NONE", fn,
                   (int)r);
}

/* sum(values) / count: the division is linear, so a Partial(sum) of shard sums stays a
 * Partial(sum) and the mean is exact for uneven shards. count is the product of the global
 * dims of count_of in count_mask, told to a tracer through the size note (autograd/size_note.h)
 * so that dt_compile keeps it symbolic instead of baking the traced count. */
static dt_status sum_divided(dt_tensor *values, const dt_tensor *count_of, unsigned count_mask,
                             dt_tensor **out) {
  int n = global_ndim(count_of);
  const int64_t *s = global_shape(count_of);
  double count = 1.0;
  for (int d = 0; d < n; d++) {
    if (count_mask & (1u << d)) count *= (double)s[d];
  }
  dt_tensor *sum = NULL;
  dt_status st = dt_sum(values, &sum);
  dt__size_note = (dt_size_note){.count_of = count_of, .count_mask = count_mask};
  if (!st) st = dt_div_scalar(sum, count, out);
  dt__size_note = (dt_size_note){0};
  dt_tensor_release(sum);
  return st;
}

dt_status dt_mse_loss(dt_tensor *input, dt_tensor *target, dt_loss_reduction reduction,
                      dt_tensor **out) {
  if (!input || !target || !out) {
    return dt__error(DT_ERR_INVALID, "dt_mse_loss: NULL argument (input %p, target %p, out %p)",
                     (void *)input, (void *)target, (void *)out);
  }
  *out = NULL;
  dt_status st = check_reduction("dt_mse_loss", reduction);
  if (st) return st;
  st = check_meshes("dt_mse_loss", "input", input, "target", target);
  if (st) return st;
  /* Integers would square and mean in integer arithmetic (a truncated mean) and have no
   * gradient; bool has no subtraction. PyTorch's mse_loss is for floating tensors too. */
  if (!dt_dtype_is_floating(dt_tensor_dtype(input)) ||
      !dt_dtype_is_floating(dt_tensor_dtype(target))) {
    return dt__error(DT_ERR_DTYPE, "dt_mse_loss: input %s and target %s (expected floating dtypes)",
                     dt_dtype_name(dt_tensor_dtype(input)), dt_dtype_name(dt_tensor_dtype(target)));
  }
  int n = global_ndim(input);
  const int64_t *s = global_shape(input);
  if (n != global_ndim(target) || memcmp(s, global_shape(target), sizeof(int64_t) * (size_t)n)) {
    char b1[160], b2[160];
    return dt__error(DT_ERR_SHAPE, "dt_mse_loss: input %s and target %s differ in shape",
                     dt__format_ints(b1, sizeof b1, n, s),
                     dt__format_ints(b2, sizeof b2, global_ndim(target), global_shape(target)));
  }
  dt_tensor *diff = NULL, *sq = NULL;
  st = dt_sub(input, target, &diff);
  if (!st) st = dt_mul(diff, diff, &sq);
  if (!st) {
    if (reduction == DT_LOSS_NONE) {
      *out = dt_tensor_retain(sq);
    } else if (reduction == DT_LOSS_SUM) {
      st = dt_sum(sq, out);
    } else {
      st = sum_divided(sq, input, n > 0 ? (unsigned)((1ull << n) - 1) : 0u, out);
    }
  }
  dt_tensor_release(diff);
  dt_tensor_release(sq);
  return st;
}

/* ---- Vocabulary-parallel cross-entropy ------------------------------------------------- */

/* Whether logits are sharded on the class dim on some mesh dim. */
static bool class_sharded(dt_tensor *logits) {
  if (!dt_tensor_is_distributed(logits)) return false;
  int n = dt_mesh_ndim(dt_dist_mesh(logits));
  for (int d = 0; d < n; d++) {
    dt_placement p = dt_dist_placements(logits)[d];
    if (p.kind == DT_SHARD && p.dim == 1) return true;
  }
  return false;
}

/* Every local target in [0, classes) or the ignored index. Each rank checks the targets it
 * holds: with replicated targets (the usual layout) every rank finds the same error. */
static dt_status check_targets(const char *fn, dt_tensor *target, int64_t classes,
                               const dt_cross_entropy_params *o) {
  dt_tensor *local = NULL, *dense = NULL;
  dt_status st = dt_tensor_is_distributed(target) ? dt_dist_to_local(target, &local)
                                                  : (local = dt_tensor_retain(target), DT_OK);
  if (!st) st = dt_contiguous(local, &dense);
  if (!st) {
    const int64_t *t = dt_tensor_data(dense);
    for (int64_t i = 0; i < dt__tensor_numel(dense) && !st; i++) {
      if ((o->has_ignore_index && t[i] == o->ignore_index) || (t[i] >= 0 && t[i] < classes))
        continue;
      st = dt__error(DT_ERR_INVALID,
                     "%s: target %lld (local row %lld) is out of range for %lld classes", fn,
                     (long long)t[i], (long long)i, (long long)classes);
    }
  }
  dt_tensor_release(local);
  dt_tensor_release(dense);
  return st;
}

/* terms with every Partial mesh dim reduced (one all_reduce of the [N, k] terms). */
static dt_status reduce_partials(dt_tensor *terms, dt_tensor **out) {
  if (!dt_tensor_is_distributed(terms)) {
    *out = dt_tensor_retain(terms);
    return DT_OK;
  }
  int n = dt_mesh_ndim(dt_dist_mesh(terms));
  dt_placement pl[DT_MESH_MAX_DIMS];
  for (int d = 0; d < n; d++) {
    dt_placement p = dt_dist_placements(terms)[d];
    pl[d] = p.kind == DT_PARTIAL ? dt_replicate() : p;
  }
  return dt_dist_redistribute(terms, n, pl, out);
}

/* PyTorch's loss_parallel: logits [N, C] sharded on C are never gathered. Per row, the max
 * (detached: it only shifts; one all_reduce of [N, 1]), then one op over the local classes,
 * cross_entropy_vocab_terms: the sum of exp(x - max), the target's x - max (on the rank
 * holding it) and, with label smoothing, the sum of x - max, summed over the class shards by
 * one all_reduce of [N, 2] (or [N, 3]). No one-hot is made; the backward is one op on the
 * local shard (softmax - one-hot from the same terms) and moves nothing. Returns the per-row
 * losses [N, 1], zero for ignored rows. */
static dt_status vocab_parallel_rows(const char *fn, dt_tensor *logits, dt_tensor *target,
                                     const dt_cross_entropy_params *o, int64_t classes,
                                     dt_tensor **rows) {
  dt_tensor *max = NULL, *shift = NULL, *t2 = NULL, *terms = NULL, *sums = NULL, *s = NULL,
            *zt = NULL, *lse = NULL, *loss = NULL, *tmp = NULL, *keep = NULL, *keepf = NULL;
  double eps = o->label_smoothing;
  dt_status st = check_targets(fn, target, classes, o);
  bool prev = dt_grad_mode_set(false);
  if (!st) st = dt_amax(logits, 1, (int64_t[]){1}, true, &max);
  dt_grad_mode_set(prev);
  if (!st) st = dt_detach(max, &shift);
  if (!st) st = dt_unsqueeze(target, 1, &t2);
  if (!st) st = dt__cross_entropy_vocab_terms(logits, shift, t2, eps != 0.0 ? 3 : 2, &terms);
  if (!st) st = reduce_partials(terms, &sums);
  if (!st) st = dt_narrow(sums, 1, 0, 1, &s);
  if (!st) st = dt_narrow(sums, 1, 1, 1, &zt);
  if (!st) st = dt_log(s, &lse);
  /* loss = lse - (1 - eps) z_t - eps / C sum_j z_j (z = x - max; lse is of z). */
  if (!st) st = dt_sub_ex(lse, zt, 1.0 - eps, &loss);
  if (!st && eps != 0.0) {
    dt_tensor *sumz = NULL, *next = NULL;
    st = dt_narrow(sums, 1, 2, 1, &sumz);
    if (!st) st = dt_sub_ex(loss, sumz, eps / (double)classes, &next);
    dt_tensor_release(sumz);
    dt_tensor_release(loss);
    loss = next;
  }
  if (!st && o->has_ignore_index) {
    st = dt_ne_scalar(t2, (double)o->ignore_index, &keep);
    if (!st) st = dt_to(keep, dt_tensor_dtype(logits), &keepf);
    if (!st) st = dt_mul(loss, keepf, &tmp);
    if (!st) {
      dt_tensor_release(loss);
      loss = tmp;
      tmp = NULL;
    }
  }
  if (!st) *rows = dt_tensor_retain(loss);
  dt_tensor *all[] = {max, shift, t2, terms, sums, s, zt, lse, loss, tmp, keep, keepf};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
  return st;
}

dt_status dt_cross_entropy(dt_tensor *logits, dt_tensor *target, dt_tensor **out) {
  return dt_cross_entropy_ex(logits, target, NULL, out);
}

/* sum(rows) / (the number of targets not equal to the ignored index, over all shards), both
 * as tensors: the count depends on the targets' values, so it is computed by ops (a compiled
 * call recomputes it; a number read here would be a constant of the trace). Zero kept targets
 * give 0 / 0 = nan, as PyTorch. The count is exact in floating point below 2^24 targets, so the
 * quotient is the correctly rounded sum / count either way. */
static dt_status mean_over_kept(dt_tensor *rows, dt_tensor *target, int64_t ignore_index,
                                dt_tensor **out) {
  dt_tensor *ne = NULL, *kept = NULL, *count = NULL, *sum = NULL;
  dt_status st = dt_ne_scalar(target, (double)ignore_index, &ne);
  if (!st) st = dt_to(ne, dt_tensor_dtype(rows), &kept);
  if (!st) st = dt_sum(kept, &count);
  if (!st) st = dt_sum(rows, &sum);
  if (!st) st = dt_div(sum, count, out);
  dt_tensor_release(ne);
  dt_tensor_release(kept);
  dt_tensor_release(count);
  dt_tensor_release(sum);
  return st;
}

dt_status dt_cross_entropy_ex(dt_tensor *logits, dt_tensor *target,
                              const dt_cross_entropy_options *options, dt_tensor **out) {
  static const char fn[] = "dt_cross_entropy_ex";
  if (!logits || !target || !out) {
    return dt__error(DT_ERR_INVALID, "%s: NULL argument (logits %p, target %p, out %p)", fn,
                     (void *)logits, (void *)target, (void *)out);
  }
  *out = NULL;
  dt_loss_reduction reduction = options ? options->reduction : DT_LOSS_MEAN;
  dt_cross_entropy_params o = {.has_ignore_index = options && options->ignore_index,
                               .ignore_index =
                                   options && options->ignore_index ? *options->ignore_index : 0,
                               .label_smoothing = options ? options->label_smoothing : 0.0};
  dt_status st = check_reduction(fn, reduction);
  if (st) return st;
  if (!(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0)) {
    return dt__error(DT_ERR_INVALID, "%s: label_smoothing %g is outside [0, 1]", fn,
                     o.label_smoothing);
  }
  st = check_meshes(fn, "logits", logits, "target", target);
  if (st) return st;
  int nl = global_ndim(logits), nt = global_ndim(target);
  const int64_t *sl = global_shape(logits), *stg = global_shape(target);
  if (nl != 2 || nt != 1 || sl[0] != stg[0]) {
    char b1[160], b2[160];
    return dt__error(DT_ERR_SHAPE, "%s: logits %s and target %s (expected [N, C] and [N])", fn,
                     dt__format_ints(b1, sizeof b1, nl, sl),
                     dt__format_ints(b2, sizeof b2, nt, stg));
  }
  if (!dt_dtype_is_floating(dt_tensor_dtype(logits)) || dt_tensor_dtype(target) != DT_I64) {
    return dt__error(DT_ERR_DTYPE, "%s: logits %s and target %s (expected floating and int64)", fn,
                     dt_dtype_name(dt_tensor_dtype(logits)),
                     dt_dtype_name(dt_tensor_dtype(target)));
  }
  dt_tensor *target2 = NULL, *rows = NULL;
  if (class_sharded(logits)) {
    st = vocab_parallel_rows(fn, logits, target, &o, sl[1], &rows);
  } else {
    st = dt_unsqueeze(target, 1, &target2);
  }
  if (!st && !rows) {
    dt_op_call call = {.op = DT_OP_CROSS_ENTROPY_LOSS,
                       .n_inputs = 2,
                       .inputs = {logits, target2},
                       .n_ints = 2,
                       .ints = {o.ignore_index, o.has_ignore_index ? 1 : 0},
                       .scalars = {o.label_smoothing},
                       .n_outputs = 1,
                       .outputs = &rows};
    st = dt__dispatch(&call);
  }
  if (!st) {
    if (reduction == DT_LOSS_NONE) {
      st = dt_squeeze_dim(rows, 1, out);
    } else if (reduction == DT_LOSS_SUM) {
      st = dt_sum(rows, out);
    } else {
      if (o.has_ignore_index)
        st = mean_over_kept(rows, target, o.ignore_index, out);
      else
        st = sum_divided(rows, logits, 1u, out); /* the rows: dim 0 of logits */
    }
  }
  dt_tensor_release(target2);
  dt_tensor_release(rows);
  return st;
}
