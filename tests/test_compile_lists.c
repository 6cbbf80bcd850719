/* dt_compile of tensor-list ops (cat, stack) whose elements dispatch redistributes: each
 * redistributed element is a redistribute node of the compiled graph, which the list call
 * reads; the call then runs on the shards without dispatch moving them again. On 2 and 4
 * ranks of the threads backend, every dim dynamic:
 *   out0 = cat([a S(0), b R], 0), out1 = stack([c P(sum), d S(1)], 0), out2 = cat([d, c], 1)
 * at three sizes, twice per size with other values: placements and values bitwise equal to
 * eager, values equal to naive loops over the whole tensors (the Partial one summed over the
 * ranks' pieces), the same collectives and bytes as eager (comm ledger), no recompile.
 * A joint forward+backward trace (options.backward) of mse(cat([x S(0), y R], 0), t) gives
 * eager's loss and gradients (and 2 (h - t) / numel) at three batches; cat's backward is
 * specialized to the traced sizes (narrow has no symbolic rule), so each size compiles once.
 * SHOW_VARIANT=1 prints the traced variants, SHOW_LEDGER=1 the ledgers. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "comm_helpers.h"
#include "compile_helpers.h"
/* Private header: compiled results keep eager placements: compared with dt__placements_equal. */
#include "distributed/dist_impl.h"

#define F 8 /* columns: even on 2 and 4 ranks for d's Shard(1) */

static dt_status lists_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_status st = dt_cat(2, (dt_tensor *[]){in[0], in[1]}, 0, &out[0]);
  if (!st) st = dt_stack(2, (dt_tensor *[]){in[2], in[3]}, 0, &out[1]);
  if (!st) st = dt_cat(2, (dt_tensor *[]){in[3], in[2]}, 1, &out[2]);
  return st;
}

/* The reference of output o at element (r, q) of its whole [rows, cols] view (out1's [2, n, F]
 * seen as [2n, F]); pc is the whole of c (the sum of the ranks' pieces). */
static double reference(int o, int64_t r, int64_t q, int64_t n, const float *pa, const float *pb,
                        const float *pc, const float *pd) {
  if (o == 0) return r < n ? pa[r * F + q] : pb[(r - n) * F + q];
  if (o == 1) return r < n ? pc[r * F + q] : pd[(r - n) * F + q];
  return q < F ? pd[r * F + q] : pc[r * F + q - F];
}

static dt_status run_and_count(dt_compiled *c, dt_tensor *const *in, dt_tensor **out,
                               int64_t *bytes, int64_t *calls) {
  dt_comm_ledger *ledger = NULL;
  dt_status st = dt_comm_ledger_start(&ledger);
  if (st) return st;
  st = c ? dt_compiled_call(c, 4, in, 3, out) : lists_fn(NULL, 4, in, 3, out);
  dt_status stop = dt_comm_ledger_stop(ledger);
  *bytes = dt_comm_ledger_bytes(ledger, NULL);
  if (getenv("SHOW_LEDGER")) {
    char buf[2048];
    dt_comm_ledger_format(ledger, buf, sizeof buf);
    fprintf(stderr, "%s: %s\n", c ? "compiled" : "eager", buf);
  }
  *calls = dt_comm_ledger_count(ledger, NULL);
  dt_comm_ledger_destroy(ledger);
  return st ? st : stop;
}

static dt_status lists_rank(dt_comm *world, void *arg) {
  (void)arg;
  int rank = dt_comm_rank(world), world_size = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  RANK_OK(mesh_1d(world, &mesh));
  dt_compiled *c = NULL;
  RANK_OK(dt_compile(lists_fn, NULL, 4, 3, &(dt_compile_options){.dynamic = true}, &c));
  static const int64_t sizes[3][2] = {{6, 3}, {9, 5}, {5, 7}}; /* n, m */
  for (int call = 0; call < 6; call++) {
    int64_t n = sizes[call / 2][0], m = sizes[call / 2][1];
    int salt = 1 + call;
    dt_tensor *fa = ramp_f32(2, (int64_t[]){n, F}, salt),
              *fb = ramp_f32(2, (int64_t[]){m, F}, salt + 10),
              *fd = ramp_f32(2, (int64_t[]){n, F}, salt + 30);
    dt_tensor *piece =
        ramp_f32(2, (int64_t[]){n, F}, salt + 20 + rank); /* this rank's addend of c */
    dt_tensor *fc = NULL;                                 /* the whole of c: every rank's addend */
    RANK_OK(dt_zeros(2, (int64_t[]){n, F}, DT_F32, &fc));
    for (int r = 0; r < world_size; r++) {
      dt_tensor *p = ramp_f32(2, (int64_t[]){n, F}, salt + 20 + r);
      for (int64_t i = 0; i < n * F; i++)
        ((float *)dt_tensor_data(fc))[i] += ((const float *)dt_tensor_data(p))[i];
      dt_tensor_release(p);
    }
    dt_tensor *in[4] = {NULL, NULL, NULL, NULL};
    dt_tensor *eager[3] = {NULL, NULL, NULL}, *comp[3] = {NULL, NULL, NULL};
    RANK_OK(dt_dist_distribute_tensor(mesh, fa, 1, (dt_placement[]){dt_shard(0)}, &in[0]));
    RANK_OK(dt_dist_distribute_tensor(mesh, fb, 1, (dt_placement[]){dt_replicate()}, &in[1]));
    RANK_OK(dt_dist_from_local(mesh, piece, 1, (dt_placement[]){dt_partial(DT_REDUCE_SUM)}, NULL,
                               &in[2]));
    RANK_OK(dt_dist_distribute_tensor(mesh, fd, 1, (dt_placement[]){dt_shard(1)}, &in[3]));
    int64_t eager_bytes = 0, eager_calls = 0, comp_bytes = 0, comp_calls = 0;
    RANK_OK(run_and_count(NULL, in, eager, &eager_bytes, &eager_calls));
    RANK_OK(run_and_count(c, in, comp, &comp_bytes, &comp_calls));
    /* The first call traces (its eager run is the trace); later ones run the variant. */
    RANK_CHECK(comp_bytes == eager_bytes && comp_calls == eager_calls,
               "call %d: compiled moved %lld bytes in %lld collectives, eager %lld in %lld", call,
               (long long)comp_bytes, (long long)comp_calls, (long long)eager_bytes,
               (long long)eager_calls);
    RANK_CHECK(eager_calls >= 1, "call %d: eager redistributed %lld times", call,
               (long long)eager_calls);
    for (int o = 0; o < 3; o++) {
      RANK_CHECK(dt__placements_equal(1, dt_dist_placements(comp[o]), dt_dist_placements(eager[o])),
                 "placement of output %d at call %d", o, call);
      dt_tensor *we = NULL, *wc = NULL;
      RANK_OK(whole_contiguous(eager[o], &we));
      RANK_OK(whole_contiguous(comp[o], &wc));
      int64_t rows = o == 0 ? n + m : o == 1 ? 2 * n : n, cols = o == 2 ? 2 * F : F;
      RANK_CHECK(dt_tensor_numel(wc) == rows * cols && dt_tensor_numel(we) == rows * cols,
                 "output %d size", o);
      RANK_CHECK(memcmp(dt_tensor_data(we), dt_tensor_data(wc), (size_t)(rows * cols) * 4) == 0,
                 "output %d differs from eager at n %lld, m %lld (call %d)", o, (long long)n,
                 (long long)m, call);
      const float *pw = dt_tensor_data(wc);
      for (int64_t r = 0; r < rows; r++) {
        for (int64_t q = 0; q < cols; q++) {
          double ref = reference(o, r, q, n, dt_tensor_data(fa), dt_tensor_data(fb),
                                 dt_tensor_data(fc), dt_tensor_data(fd));
          RANK_CHECK(fabs(pw[r * cols + q] - ref) <= 1e-5 * (1 + fabs(ref)),
                     "output %d [%lld, %lld]: %g, reference %g", o, (long long)r, (long long)q,
                     (double)pw[r * cols + q], ref);
        }
      }
      dt_tensor_release(we);
      dt_tensor_release(wc);
    }
    dt_tensor *all[] = {fa,    fb,       fc,       fd,       piece,   in[0],   in[1],  in[2],
                        in[3], eager[0], eager[1], eager[2], comp[0], comp[1], comp[2]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
  }
  char *text = NULL;
  RANK_OK(dt_compiled_to_string(c, 0, &text));
  if (getenv("SHOW_VARIANT") && rank == 0) fprintf(stderr, "%s\n", text);
  /* Each redistributed list element is a node the list call reads; the calls run on the
   * shards. */
  RANK_CHECK(strstr(text, "= redistribute(%in0, from=[S(0)], to=[R]") != NULL &&
                 strstr(text, "shard_to_partial(mesh dim 0: S(1) -> P(sum))") != NULL &&
                 strstr(text, "stack([%in2, %redistribute") != NULL &&
                 strstr(text, "= redistribute(%in3, from=[S(1)]") != NULL &&
                 strstr(text, "cat([%redistribute") != NULL &&
                 strstr(text, "all_gather(mesh dim 0: S(0) -> R)") != NULL,
             "redistribute nodes in:\n%s", text);
  RANK_CHECK(strstr(text, "planned per call") == NULL && strstr(text, "on the shards") != NULL,
             "list calls not on the shards:\n%s", text);
  dt_free(text);
  dt_compile_stats stats;
  RANK_OK(dt_compiled_stats(c, &stats));
  RANK_CHECK(stats.recompiles == 0 && stats.compiles == 1, "compiles %lld, recompiles %lld: %s",
             (long long)stats.compiles, (long long)stats.recompiles,
             dt_compiled_recompile_reason(c, 0) ? dt_compiled_recompile_reason(c, 0) : "-");
  dt_compiled_destroy(c);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(compile_lists, cat_and_stack_of_redistributed_elements_2_ranks) {
  SPAWN_OK(2, lists_rank, NULL);
}
Test(compile_lists, cat_and_stack_of_redistributed_elements_4_ranks) {
  SPAWN_OK(4, lists_rank, NULL);
}

/* ---- A joint forward+backward trace ------------------------------------------------------ */

/* in[0]: x [n, F] Shard(0), in[1]: y [m, F] Replicate (both require grad), in[2]: t [n+m, F]
 * Replicate: mse(cat([x, y], 0), t). x is gathered for the cat, and autograd saves the
 * gathered copy. */
static dt_status step_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  dt_tensor *h = NULL;
  dt_status st = dt_cat(2, (dt_tensor *[]){in[0], in[1]}, 0, &h);
  if (!st) st = dt_mse_loss(h, in[2], DT_LOSS_MEAN, &out[0]);
  dt_tensor_release(h);
  return st;
}

static dt_status make_inputs(dt_mesh *mesh, int64_t n, int64_t m, int salt, dt_tensor **in) {
  dt_tensor *fx = ramp_f32(2, (int64_t[]){n, F}, salt),
            *fy = ramp_f32(2, (int64_t[]){m, F}, salt + 5),
            *ft = ramp_f32(2, (int64_t[]){n + m, F}, salt + 9);
  dt_status st = dt_dist_distribute_tensor(mesh, fx, 1, (dt_placement[]){dt_shard(0)}, &in[0]);
  if (!st) st = dt_dist_distribute_tensor(mesh, fy, 1, (dt_placement[]){dt_replicate()}, &in[1]);
  if (!st) st = dt_dist_distribute_tensor(mesh, ft, 1, (dt_placement[]){dt_replicate()}, &in[2]);
  if (!st) st = dt_tensor_set_requires_grad(in[0], true);
  if (!st) st = dt_tensor_set_requires_grad(in[1], true);
  dt_tensor_release(fx);
  dt_tensor_release(fy);
  dt_tensor_release(ft);
  return st;
}

static dt_status backward_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(mesh_1d(world, &mesh));
  dt_compile_mark marks[3] = {{.input = 0, .dim = 0, .dynamic = true},
                              {.input = 1, .dim = 0, .dynamic = true},
                              {.input = 2, .dim = 0, .dynamic = true}};
  dt_compiled *c = NULL;
  RANK_OK(dt_compile(step_fn, NULL, 3, 1,
                     &(dt_compile_options){.n_marks = 3, .marks = marks, .backward = true}, &c));
  static const int64_t sizes[3][2] = {{6, 3}, {9, 5}, {5, 7}};
  for (int call = 0; call < 6; call++) {
    int64_t n = sizes[call / 2][0], m = sizes[call / 2][1];
    dt_tensor *ie[3] = {NULL, NULL, NULL}, *ic[3] = {NULL, NULL, NULL}, *le = NULL, *lc = NULL;
    RANK_OK(make_inputs(mesh, n, m, 2 + call, ie));
    RANK_OK(make_inputs(mesh, n, m, 2 + call, ic));
    RANK_OK(step_fn(NULL, 3, ie, 1, &le));
    RANK_OK(dt_backward(le, NULL));
    RANK_OK(dt_compiled_call(c, 3, ic, 1, &lc));
    bool eq = false;
    RANK_OK(same_whole(lc, le, &eq));
    RANK_CHECK(eq, "loss at n %lld, m %lld (call %d)", (long long)n, (long long)m, call);
    for (int k = 0; k < 2; k++) {
      dt_tensor *ge = NULL, *gc = NULL;
      RANK_OK(dt_tensor_grad(ie[k], &ge));
      RANK_OK(dt_tensor_grad(ic[k], &gc));
      RANK_CHECK(ge && gc, "grad of input %d at call %d", k, call);
      RANK_CHECK(dt__placements_equal(1, dt_dist_placements(gc), dt_dist_placements(ge)),
                 "placement of the grad of input %d", k);
      RANK_OK(same_whole(gc, ge, &eq));
      RANK_CHECK(eq, "grad of input %d at n %lld, m %lld (call %d)", k, (long long)n, (long long)m,
                 call);
      /* The independent reference: d mean((h - t)^2) / dh = 2 (h - t) / numel. */
      dt_tensor *wg = NULL, *wi = NULL, *wt = NULL;
      RANK_OK(whole_contiguous(gc, &wg));
      RANK_OK(whole_contiguous(ic[k], &wi));
      RANK_OK(whole_contiguous(ic[2], &wt));
      const float *pg = dt_tensor_data(wg), *pi = dt_tensor_data(wi), *pt = dt_tensor_data(wt);
      int64_t rows = k ? m : n, first = k ? n : 0;
      for (int64_t i = 0; i < rows * F; i++) {
        double ref = 2.0 * ((double)pi[i] - pt[first * F + i]) / (double)((n + m) * F);
        RANK_CHECK(fabs(pg[i] - ref) <= 1e-6 * (1 + fabs(ref)), "grad %d [%lld]: %g, ref %g", k,
                   (long long)i, (double)pg[i], ref);
      }
      dt_tensor *all[] = {ge, gc, wg, wi, wt};
      for (int i = 0; i < 5; i++) dt_tensor_release(all[i]);
    }
    dt_tensor *all[] = {ie[0], ie[1], ie[2], ic[0], ic[1], ic[2], le, lc};
    for (int i = 0; i < 8; i++) dt_tensor_release(all[i]);
  }
  char *text = NULL;
  RANK_OK(dt_compiled_to_string(c, 0, &text));
  if (getenv("SHOW_VARIANT") && dt_comm_rank(world) == 0) fprintf(stderr, "%s\n", text);
  RANK_CHECK(strstr(text, "= redistribute(%in0, from=[S(0)], to=[R]") != NULL &&
                 strstr(text, "cat([%redistribute") != NULL,
             "redistribute nodes in:\n%s", text);
  dt_free(text);
  dt_compile_stats stats;
  RANK_OK(dt_compiled_stats(c, &stats));
  /* cat's backward narrows the gradient with sizes that are numbers of the trace (narrow has
   * no symbolic rule): each new size recompiles, the second call of a size runs the variant. */
  const char *why = dt_compiled_recompile_reason(c, 0);
  RANK_CHECK(stats.recompiles == 2 && stats.compiles == 3 && why && strstr(why, "narrow"),
             "compiles %lld, recompiles %lld: %s", (long long)stats.compiles,
             (long long)stats.recompiles, why ? why : "-");
  dt_compiled_destroy(c);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(compile_lists, joint_backward_of_a_cat_2_ranks) { SPAWN_OK(2, backward_rank, NULL); }
Test(compile_lists, joint_backward_of_a_cat_4_ranks) { SPAWN_OK(4, backward_rank, NULL); }
