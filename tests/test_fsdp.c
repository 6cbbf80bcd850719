/* Fully sharded data parallel (dt_parallel_fsdp): PyTorch's training fixtures
 * (../shared/fixtures/training) trained under fully_shard on 1 to 4 ranks (threads backend)
 * must give PyTorch's loss at every step (relative 1e-5) and its final weights (relative 1e-4,
 * gathered from the Shard(0) parameters). Batches of 10 and 24 rows and 18 and 32 hidden units
 * give uneven shards. The comm ledger shows all-gathers in forward and reduce-scatters (no
 * all-reduce) in backward; after forward the modules hold only their shards again (also without
 * resharding, where the units keep the gathered buffers for backward). */
#include <criterion/criterion.h>

#include "comm_helpers.h"
#include "dtensor/parallel.h"

#define STEPS 20
#include "training_fixtures.h"
#include "fixture_mlp.h"
#include "fixture_main.h"
#define LOSS_RTOL 1e-5
#define WEIGHT_RTOL 1e-4
#define WEIGHT_ATOL 1e-6

typedef enum mode { FSDP, FSDP_KEEP_UNSHARDED, FSDP_PREFETCH, DDP, DDP_SMALL_BUCKETS } mode;

typedef struct train_arg {
  const run *r;
  mode m;
  double losses[STEPS]; /* filled by rank 0 */
  char ledger_text[2048];
} train_arg;

static dt_status compare_final(const run *r, dt_tensor *const *w) {
  return fixture_compare_final(r->name, w, param_names, 4, WEIGHT_RTOL, WEIGHT_ATOL, false);
}

/* The bytes of the local parts of the parameters the module tree holds right now. */
static int64_t held_bytes(dt_module *model) {
  params_ctx c = {0};
  dt_module_visit_tensors(model, collect, &c);
  int64_t bytes = 0;
  for (int i = 0; i < c.n; i++) {
    dt_tensor *local = NULL;
    if (dt_dist_to_local(c.t[i], &local) == DT_OK) bytes += dt_tensor_numel(local) * 4;
    dt_tensor_release(local);
  }
  return bytes;
}

static dt_status train(train_arg *arg, dt_mesh *mesh, double *losses, char *ledger_text,
                       size_t ledger_size) {
  const run *r = arg->r;
  dt_module *model = NULL;
  RANK_OK(build_model(r, &model));
  bool ddp = arg->m == DDP || arg->m == DDP_SMALL_BUCKETS;
  /* One byte: every gradient is a bucket of its own; by default all four fit in one. */
  dt_ddp_options ddp_opt = {.bucket_bytes = arg->m == DDP_SMALL_BUCKETS ? 1 : 0};
  if (ddp) {
    RANK_OK(dt_parallel_ddp(model, mesh, 0, &ddp_opt));
  } else {
    dt_fsdp_options fo = {.mesh_dim = 0,
                          .keep_unsharded_after_forward = arg->m == FSDP_KEEP_UNSHARDED,
                          .prefetch = arg->m == FSDP_PREFETCH};
    RANK_OK(dt_parallel_fsdp(model, mesh, &fo));
  }

  params_ctx pc = {0};
  RANK_OK(dt_module_visit_tensors(model, collect, &pc));
  RANK_CHECK(pc.n == 4, "%d parameters after fully_shard", pc.n);
  dt_tensor *w[4];
  int64_t shard_bytes = 0, world = dt_mesh_size(mesh, 0);
  for (int i = 0; i < 4; i++) {
    w[i] = pc.t[i];
    RANK_CHECK(strcmp(pc.names[i], param_names[i]) == 0, "parameter %d is %s", i, pc.names[i]);
    RANK_CHECK(dt_tensor_is_distributed(w[i]) && dt_tensor_is_leaf(w[i]) &&
                   dt_tensor_requires_grad(w[i]),
               "%s is not a distributed leaf requiring grad", param_names[i]);
    dt_placement p = dt_dist_placements(w[i])[0];
    RANK_CHECK(ddp ? p.kind == DT_REPLICATE : p.kind == DT_SHARD && p.dim == 0, "%s is not %s",
               param_names[i], ddp ? "Replicate" : "Shard(0)");
    dt_tensor_retain(w[i]);
  }
  shard_bytes = held_bytes(model);

  dt_safetensors *data = NULL;
  dt_tensor *x = NULL, *y = NULL;
  dt_placement S0 = dt_shard(0);
  RANK_OK(open_fixture(r->name, "data", &data));
  RANK_OK(dt_safetensors_load_distributed(data, "x", mesh, 1, &S0, &x));
  RANK_OK(dt_safetensors_load_distributed(data, "y", mesh, 1, &S0, &y));
  dt_safetensors_destroy(data);

  dt_optimizer *opt = NULL;
  if (r->adamw) {
    dt_adam_options o = {
        .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    RANK_OK(dt_optimizer_create_adamw(4, w, &o, &opt));
  } else {
    dt_sgd_options o = {.lr = 0.05, .momentum = 0.9};
    RANK_OK(dt_optimizer_create_sgd(4, w, &o, &opt));
  }
  for (int s = 0; s < STEPS; s++) {
    dt_tensor *out = NULL, *loss = NULL;
    dt_comm_ledger *fwd = NULL, *bwd = NULL;
    RANK_OK(dt_optimizer_zero_grad(opt, true));
    if (s == 0) RANK_OK(dt_comm_ledger_start(&fwd));
    RANK_OK(dt_module_forward(model, x, &out));
    if (s == 0) RANK_OK(dt_comm_ledger_stop(fwd));
    /* Reshard after forward: the module holds its shards only, not the gathered weights. */
    int64_t held = held_bytes(model);
    /* Without resharding too the module holds its shards between forwards (the unit keeps
     * the gathered buffers for backward): a state dict or a load sees the optimizer's leaves. */
    if (ddp) {
      RANK_CHECK(held == shard_bytes, "DDP parameters changed size in forward");
    } else {
      RANK_CHECK(held == shard_bytes, "after forward the module holds %lld bytes, its shards %lld",
                 (long long)held, (long long)shard_bytes);
      RANK_CHECK(dt_module_get_tensor(model, "0.weight") == w[0], "0.weight is not the shard");
    }
    RANK_OK(r->cross_entropy ? dt_cross_entropy(out, y, &loss)
                             : dt_mse_loss(out, y, DT_LOSS_MEAN, &loss));
    dt_tensor_release(out);
    if (s == 0) RANK_OK(dt_comm_ledger_start(&bwd));
    RANK_OK(dt_backward(loss, NULL));
    if (s == 0) RANK_OK(dt_comm_ledger_stop(bwd));
    if (s == 0 && ddp) {
      /* No communication in forward or backward: the gradients stay Partial until the
       * bucketed all-reduce, which is one collective per bucket; the step then moves
       * nothing. */
      int64_t fwd_calls = dt_comm_ledger_count(fwd, "all_gather") +
                          dt_comm_ledger_count(fwd, "all_gather_uneven") +
                          dt_comm_ledger_count(fwd, "all_reduce");
      int64_t bwd_calls = dt_comm_ledger_count(bwd, "all_reduce") +
                          dt_comm_ledger_count(bwd, "reduce_scatter") +
                          dt_comm_ledger_count(bwd, "reduce_scatter_uneven");
      RANK_CHECK(fwd_calls == 0 && bwd_calls == 0, "DDP forward %lld / backward %lld collectives",
                 (long long)fwd_calls, (long long)bwd_calls);
      dt_comm_ledger_destroy(fwd);
      dt_comm_ledger_destroy(bwd);
      dt_comm_ledger *red = NULL;
      int buckets = 0;
      RANK_OK(dt_comm_ledger_start(&red));
      RANK_OK(dt_parallel_ddp_reduce_gradients(4, w, 0, &ddp_opt, &buckets));
      RANK_OK(dt_comm_ledger_stop(red));
      int want = arg->m == DDP_SMALL_BUCKETS ? 4 : 1;
      RANK_CHECK(buckets == want, "%d buckets, expected %d", buckets, want);
      RANK_CHECK(dt_comm_ledger_count(red, "all_reduce") == want, "%lld all_reduces for %d buckets",
                 (long long)dt_comm_ledger_count(red, "all_reduce"), buckets);
      dt_comm_ledger_format(red, ledger_text, ledger_size);
      dt_comm_ledger_destroy(red);
      for (int i = 0; i < 4; i++) {
        dt_tensor *g = NULL;
        RANK_OK(dt_tensor_grad(w[i], &g));
        RANK_CHECK(g && dt_dist_placements(g)[0].kind == DT_REPLICATE,
                   "grad of %s is not Replicate after the reduction", param_names[i]);
        dt_tensor_release(g);
      }
    } else if (ddp) {
      RANK_OK(dt_parallel_ddp_reduce_gradients(4, w, 0, &ddp_opt, NULL));
    }
    if (s == 0 && !ddp) {
      /* One all-gather per parameter in forward; in backward the gradients go back to
       * Shard(0) by reduce-scatters, never by an all-reduce and a slice. */
      int64_t ag = dt_comm_ledger_count(fwd, "all_gather") +
                   dt_comm_ledger_count(fwd, "all_gather_uneven"),
              rs = dt_comm_ledger_count(bwd, "reduce_scatter") +
                   dt_comm_ledger_count(bwd, "reduce_scatter_uneven"),
              ar = dt_comm_ledger_count(bwd, "all_reduce");
      size_t used = 0;
      used += (size_t)snprintf(ledger_text, ledger_size, "forward:\n");
      dt_comm_ledger_format(fwd, ledger_text + used, ledger_size - used);
      used = strlen(ledger_text);
      snprintf(ledger_text + used, ledger_size - used, "backward:\n");
      used = strlen(ledger_text);
      dt_comm_ledger_format(bwd, ledger_text + used, ledger_size - used);
      if (world > 1) {
        RANK_CHECK(ag == 4, "forward all-gathers: %lld\n%s", (long long)ag, ledger_text);
        RANK_CHECK(rs == 4, "backward reduce-scatters: %lld\n%s", (long long)rs, ledger_text);
        RANK_CHECK(ar == 0, "backward all-reduces: %lld\n%s", (long long)ar, ledger_text);
      }
      dt_comm_ledger_destroy(fwd);
      dt_comm_ledger_destroy(bwd);
      /* Gradients land on the sharded leaves as Shard(0), already reduced. */
      for (int i = 0; i < 4; i++) {
        dt_tensor *g = NULL;
        RANK_OK(dt_tensor_grad(w[i], &g));
        RANK_CHECK(g && dt_tensor_is_distributed(g), "%s has no distributed grad", param_names[i]);
        dt_placement gp = dt_dist_placements(g)[0];
        RANK_CHECK(gp.kind == DT_SHARD && gp.dim == 0, "grad of %s is not Shard(0)",
                   param_names[i]);
        dt_tensor_release(g);
      }
    }
    RANK_OK(loss_value(loss, &losses[s]));
    dt_tensor_release(loss);
    RANK_OK(dt_optimizer_step(opt));
  }
  RANK_OK(compare_final(r, w));
  dt_optimizer_destroy(opt);
  for (int i = 0; i < 4; i++) dt_tensor_release(w[i]);
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_module_destroy(model);
  return DT_OK;
}

static dt_status rank_main(dt_comm *world, void *varg) {
  train_arg *arg = varg;
  dt_mesh *mesh = NULL;
  double losses[STEPS];
  char text[2048] = "";
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  dt_status st = train(arg, mesh, losses, text, sizeof text);
  if (!st && dt_comm_rank(world) == 0) {
    memcpy(arg->losses, losses, sizeof losses);
    memcpy(arg->ledger_text, text, sizeof text);
  }
  dt_mesh_destroy(mesh);
  return st;
}

static void check_losses(const run *r, const char *what, const double *got) {
  double want[STEPS];
  cr_assert(expected_losses(r->name, want), "cannot read expected.json for %s", r->name);
  for (int s = 0; s < STEPS; s++) {
    cr_expect(fabs(got[s] - want[s]) <= LOSS_RTOL * fabs(want[s]),
              "%s %s step %d: loss %.9g, PyTorch %.9g (rel %.2g)", r->name, what, s + 1, got[s],
              want[s], fabs(got[s] - want[s]) / fabs(want[s]));
  }
}

static void train_all(mode m, const char *what) {
  if (!fixtures_present()) cr_skip_test("no fixtures at %s", DT_FIXTURES_DIR);
  for (int ranks = 1; ranks <= 4; ranks++) {
    for (int i = 0; i < 2; i++) {
      train_arg arg = {.r = &runs[i], .m = m};
      dt_status st = dt_comm_spawn(ranks, rank_main, &arg);
      cr_assert_eq(st, DT_OK, "%s %s on %d ranks: %s", runs[i].name, what, ranks, dt_last_error());
      char label[64];
      snprintf(label, sizeof label, "%s on %d ranks", what, ranks);
      check_losses(&runs[i], label, arg.losses);
      if (getenv("FSDP_DEBUG")) printf("%s %d ranks\n%s\n", runs[i].name, ranks, arg.ledger_text);
    }
  }
}

Test(fsdp, trains_like_pytorch_on_1_to_4_ranks, .timeout = 120) { train_all(FSDP, "fully_shard"); }

Test(fsdp, without_reshard_after_forward, .timeout = 120) {
  train_all(FSDP_KEEP_UNSHARDED, "fully_shard (no reshard)");
}

Test(fsdp, prefetch_on_1_to_4_ranks, .timeout = 120) {
  train_all(FSDP_PREFETCH, "fully_shard (prefetch)");
}

Test(fsdp, data_parallel_bucketed_on_1_to_4_ranks, .timeout = 120) {
  train_all(DDP, "data_parallel");
}

Test(fsdp, data_parallel_small_buckets_on_1_to_4_ranks, .timeout = 120) {
  train_all(DDP_SMALL_BUCKETS, "data_parallel (1-byte buckets)");
}

/* Every misuse fails with a message naming the function and the offending value. */
static dt_status bad_on_rank(dt_comm *world, void *varg) {
  (void)varg;
  dt_mesh *mesh = NULL;
  dt_module *mlp = NULL, *relu = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
  RANK_OK(dt_nn_mlp(4, 6, 2, true, true, 3, &mlp));
  RANK_OK(dt_nn_relu(&relu));
  dt_fsdp_options bad_dim = {.mesh_dim = 1};
  RANK_CHECK(dt_parallel_fsdp(mlp, mesh, &bad_dim) == DT_ERR_INVALID &&
                 strstr(dt_last_error(), "dt_parallel_fsdp: options->mesh_dim 1"),
             "%s", dt_last_error());
  RANK_CHECK(dt_parallel_fsdp(relu, mesh, NULL) == DT_ERR_INVALID &&
                 strstr(dt_last_error(), "no parameters"),
             "%s", dt_last_error());
  RANK_CHECK(dt_parallel_ddp(mlp, mesh, -1, NULL) == DT_ERR_INVALID &&
                 strstr(dt_last_error(), "dt_parallel_ddp: dim -1"),
             "%s", dt_last_error());
  dt_tensor *local = dt_module_get_tensor(mlp, "0.weight");
  RANK_CHECK(dt_parallel_ddp_reduce_gradients(1, &local, 0, NULL, NULL) == DT_ERR_INVALID &&
                 strstr(dt_last_error(), "params[0] is not distributed"),
             "%s", dt_last_error());
  /* Sharding twice: the parameters are already distributed. */
  RANK_OK(dt_parallel_fsdp(mlp, mesh, NULL));
  RANK_CHECK(dt_parallel_fsdp(mlp, mesh, NULL) == DT_ERR_UNSUPPORTED &&
                 strstr(dt_last_error(), "already distributed"),
             "%s", dt_last_error());
  RANK_CHECK(dt_parallel_ddp(mlp, mesh, 0, NULL) == DT_ERR_UNSUPPORTED, "%s", dt_last_error());
  dt_tensor *sharded = dt_module_get_tensor(mlp, "0.weight");
  RANK_CHECK(dt_parallel_ddp_reduce_gradients(1, &sharded, 2, NULL, NULL) == DT_ERR_INVALID &&
                 strstr(dt_last_error(), "dim 2 is not a dim of a 1-D mesh"),
             "%s", dt_last_error());
  dt_module_destroy(mlp);
  dt_module_destroy(relu);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(fsdp, bad_arguments_on_2_ranks) { SPAWN_OK(2, bad_on_rank, NULL); }

Test(fsdp, bad_arguments) {
  dt_module *m = NULL;
  cr_assert_eq(dt_nn_relu(&m), DT_OK);
  cr_assert_eq(dt_parallel_fsdp(NULL, NULL, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_parallel_fsdp: module") != NULL, "%s", dt_last_error());
  cr_assert_eq(dt_parallel_ddp(NULL, NULL, 0, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_parallel_ddp: module") != NULL, "%s", dt_last_error());
  cr_assert_eq(dt_parallel_ddp_reduce_gradients(-1, NULL, 0, NULL, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "n is -1") != NULL, "%s", dt_last_error());
  dt_module_destroy(m);
}
