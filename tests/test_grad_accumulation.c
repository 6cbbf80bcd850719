/* Gradient accumulation without a collective per microbatch (issue 28.4). A step over a batch
 * of 12 rows on 3 ranks equals (rel 1e-5) a step over 2 microbatches of 6 rows whose losses are
 * scaled by 1/2, under DDP and FSDP, and the comm ledger shows when gradients are reduced:
 *   DDP: backward communicates nothing; one bucketed all_reduce per optimizer step, however
 *        many microbatches (dt_parallel_ddp_reduce_gradients once, after the last);
 *   FSDP with dt_parallel_fsdp_set_gradient_sync(false) on all but the last microbatch: no
 *        reduce-scatter in their backward, one per parameter in the last; also with sync off to
 *        the end, when the optimizer step reduces; against sync on every microbatch (one
 *        reduce-scatter per parameter per microbatch). */
#include <criterion/criterion.h>

#include "comm_helpers.h"
#include "dtensor/parallel.h"

#define IN 6
#define HIDDEN 10
#define OUT 4
#define ROWS 4 /* per rank: 12 rows on 3 ranks */

typedef enum mode {
  BIG,        /* one batch */
  SYNC_LAST,  /* 2 microbatches, sync only on the last */
  SYNC_NEVER, /* 2 microbatches, sync off: the optimizer reduces */
  SYNC_EACH,  /* 2 microbatches, sync on both (the reference for bytes) */
} mode;

typedef struct acc_arg {
  bool ddp;
  mode m;
  double params[4][64];                     /* rank 0's full parameters after the step */
  int64_t reduce_calls[3], reduce_bytes[3]; /* microbatch 1's backward, 2's, the step (rank 0) */
} acc_arg;

static int64_t reductions(const dt_comm_ledger *l, bool bytes) {
  const char *names[] = {"reduce_scatter", "reduce_scatter_uneven", "all_reduce"};
  int64_t n = 0;
  for (int i = 0; i < 3; i++)
    n += bytes ? dt_comm_ledger_bytes(l, names[i]) : dt_comm_ledger_count(l, names[i]);
  return n;
}

static dt_status acc_rank(dt_comm *world, void *varg) {
  acc_arg *arg = varg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){3}, NULL, &mesh));
  dt_module *model = NULL;
  RANK_OK(dt_nn_mlp(IN, HIDDEN, OUT, true, true, 1, &model));
  RANK_OK(arg->ddp ? dt_parallel_ddp(model, mesh, 0, NULL) : dt_parallel_fsdp(model, mesh, NULL));
  struct {
    dt_tensor *t[4];
  } w;
  const char *names[4] = {"0.weight", "0.bias", "2.weight", "2.bias"};
  for (int i = 0; i < 4; i++) w.t[i] = dt_module_get_tensor(model, names[i]);
  dt_optimizer *opt = NULL;
  RANK_OK(
      dt_optimizer_create("sgd", 4, w.t, 1, (dt_optimizer_hyperparameter[]){{"lr", 0.1}}, &opt));
  dt_tensor *X = NULL, *Y = NULL;
  RANK_OK(dt_randn(2, (int64_t[]){3 * ROWS, IN}, DT_F32, 21, &X));
  RANK_OK(dt_randn(2, (int64_t[]){3 * ROWS, OUT}, DT_F32, 22, &Y));
  int micro = arg->m == BIG ? 1 : 2, rows = ROWS / micro;
  RANK_OK(dt_optimizer_zero_grad(opt, true));
  for (int k = 0; k < micro; k++) {
    bool last = k == micro - 1;
    if (!arg->ddp && arg->m != BIG) {
      bool sync = arg->m == SYNC_EACH || (arg->m == SYNC_LAST && last);
      RANK_OK(dt_parallel_fsdp_set_gradient_sync(model, sync));
    }
    /* This rank's rows of microbatch k; the target placed like the output. */
    dt_tensor *x = narrow_rows(X, rank * ROWS + k * rows, rows),
              *yl = narrow_rows(Y, rank * ROWS + k * rows, rows);
    dt_tensor *y = NULL, *out = NULL, *loss = NULL, *scaled = NULL, *half = NULL;
    RANK_OK(dt_dist_from_local(mesh, yl, 1, (dt_placement[]){dt_shard(0)}, NULL, &y));
    RANK_OK(dt_module_forward(model, x, &out));
    RANK_OK(dt_mse_loss(out, y, DT_LOSS_MEAN, &loss));
    RANK_OK(dt_full(0, NULL, 1.0 / micro, DT_F32, &half));
    RANK_OK(dt_mul(loss, half, &scaled));
    dt_comm_ledger *l = NULL;
    RANK_OK(dt_comm_ledger_start(&l));
    RANK_OK(dt_backward(scaled, NULL));
    RANK_OK(dt_comm_ledger_stop(l));
    if (rank == 0 && k < 2) {
      arg->reduce_calls[k] = reductions(l, false);
      arg->reduce_bytes[k] = reductions(l, true);
    }
    dt_comm_ledger_destroy(l);
    dt_tensor *tensors[] = {x, yl, y, out, loss, scaled, half};
    for (int i = 0; i < 7; i++) dt_tensor_release(tensors[i]);
  }
  dt_comm_ledger *l = NULL;
  RANK_OK(dt_comm_ledger_start(&l));
  if (arg->ddp) RANK_OK(dt_parallel_ddp_reduce_gradients(4, w.t, 0, NULL, NULL));
  RANK_OK(dt_optimizer_step(opt));
  RANK_OK(dt_comm_ledger_stop(l));
  if (rank == 0) {
    arg->reduce_calls[2] = reductions(l, false);
    arg->reduce_bytes[2] = reductions(l, true);
  }
  dt_comm_ledger_destroy(l);
  for (int i = 0; i < 4; i++) {
    dt_tensor *full = NULL;
    RANK_OK(dt_dist_full_tensor(w.t[i], &full));
    RANK_CHECK(dt_tensor_numel(full) <= 64, "%lld elements", (long long)dt_tensor_numel(full));
    if (rank == 0) RANK_OK(dt_tensor_to_doubles(full, arg->params[i], dt_tensor_numel(full)));
    dt_tensor_release(full);
  }
  dt_optimizer_destroy(opt);
  dt_module_destroy(model);
  dt_tensor_release(X);
  dt_tensor_release(Y);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void run(bool ddp, mode m, acc_arg *out) {
  *out = (acc_arg){.ddp = ddp, .m = m};
  SPAWN_OK(3, acc_rank, out);
}

static void same_params(const acc_arg *a, const acc_arg *b, const char *what) {
  const int sizes[4] = {HIDDEN * IN, HIDDEN, OUT * HIDDEN, OUT};
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < sizes[i]; k++)
      cr_expect(fabs(a->params[i][k] - b->params[i][k]) <= 1e-5 * (1 + fabs(b->params[i][k])),
                "%s: parameter %d[%d] %.9g, big batch %.9g", what, i, k, a->params[i][k],
                b->params[i][k]);
}

Test(grad_accumulation, ddp_reduces_once_per_step) {
  acc_arg big, acc;
  run(true, BIG, &big);
  run(true, SYNC_NEVER, &acc);
  same_params(&acc, &big, "ddp, 2 microbatches");
  cr_expect(acc.reduce_calls[0] == 0 && acc.reduce_calls[1] == 0,
            "backward reduced %lld and %lld times", (long long)acc.reduce_calls[0],
            (long long)acc.reduce_calls[1]);
  cr_expect_eq(acc.reduce_calls[2], 1, "%lld all_reduces in the step",
               (long long)acc.reduce_calls[2]);
  cr_expect_eq(acc.reduce_bytes[2], big.reduce_bytes[2]);
  cr_log_info("ddp: %lld bytes reduced per optimizer step with 2 microbatches (one bucket), as "
              "with one batch",
              (long long)acc.reduce_bytes[2]);
}

Test(grad_accumulation, fsdp_no_sync_until_the_last_microbatch) {
  acc_arg big, last, never, each;
  run(false, BIG, &big);
  run(false, SYNC_LAST, &last);
  run(false, SYNC_NEVER, &never);
  run(false, SYNC_EACH, &each);
  same_params(&last, &big, "fsdp, sync on the last microbatch");
  same_params(&never, &big, "fsdp, sync never (the step reduces)");
  same_params(&each, &big, "fsdp, sync on each microbatch");
  /* Sync on the last: nothing in the first backward, one reduce-scatter per parameter in the
   * last, nothing in the step. */
  cr_expect_eq(last.reduce_calls[0], 0);
  cr_expect_eq(last.reduce_calls[1], 4);
  cr_expect_eq(last.reduce_calls[2], 0);
  cr_expect_eq(last.reduce_bytes[1], big.reduce_bytes[0], "%lld vs %lld",
               (long long)last.reduce_bytes[1], (long long)big.reduce_bytes[0]);
  /* Never: the optimizer step reduces each gradient once, after the all_reduce on which the
   * ranks agree that every check passed (a refusal on one rank fails them all). */
  cr_expect_eq(never.reduce_calls[0] + never.reduce_calls[1], 0);
  cr_expect_eq(never.reduce_calls[2], 5);
  /* Each: twice the reductions. */
  cr_expect_eq(each.reduce_calls[0], 4);
  cr_expect_eq(each.reduce_calls[1], 4);
  int64_t with = last.reduce_bytes[0] + last.reduce_bytes[1] + last.reduce_bytes[2];
  int64_t without = each.reduce_bytes[0] + each.reduce_bytes[1] + each.reduce_bytes[2];
  cr_expect_eq(2 * with, without);
  cr_log_info("fsdp, 2 microbatches: %lld bytes reduced per optimizer step with no_sync, %lld "
              "without",
              (long long)with, (long long)without);
}

Test(grad_accumulation, set_gradient_sync_refuses_a_module_without_fsdp) {
  dt_module *m = NULL;
  cr_assert_eq(dt_nn_mlp(IN, HIDDEN, OUT, true, true, 1, &m), DT_OK);
  cr_assert_eq(dt_parallel_fsdp_set_gradient_sync(m, false), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_parallel_fsdp_set_gradient_sync"), "%s", dt_last_error());
  cr_assert_eq(dt_parallel_fsdp_set_gradient_sync(NULL, true), DT_ERR_INVALID);
  dt_module_destroy(m);
}
