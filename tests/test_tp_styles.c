/* The eager tensor-parallel styles beyond Linear: a vocabulary-parallel (rowwise) Embedding, a
 * sequence-parallel LayerNorm, then a colwise and a rowwise Linear, on [batch, seq, hidden]
 * over 2 ranks (threads), and on a 2x2 ("dp", "tp") mesh with the batch split over dp.
 * Forward output and every parameter gradient, gathered, equal the unparallelized model's on
 * the full tensors; the sharded parameters' gradients keep their placement; styles on modules
 * that do not support them fail with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_helpers.h"
#include "reference.h"

enum { VOCAB = 7, HIDDEN = 6, FFN = 8, BATCH = 4 };

/* tok (Embedding VOCAB x HIDDEN) -> norm (LayerNorm HIDDEN) -> w1 (Linear HIDDEN -> FFN) ->
 * GELU -> w2 (Linear FFN -> HIDDEN). The GELU is a plain op between the two Linears: it
 * acts element-wise on w1's Shard(-1) output. */
static dt_status model_forward(dt_module *m, dt_tensor *x, dt_tensor **out) {
  dt_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  dt_status st = dt_module_forward(dt_module_find(m, "tok"), x, &a);
  if (!st) st = dt_module_forward(dt_module_find(m, "norm"), a, &b);
  if (!st) st = dt_module_forward(dt_module_find(m, "w1"), b, &c);
  if (!st) st = dt_gelu(c, &d);
  if (!st) st = dt_module_forward(dt_module_find(m, "w2"), d, out);
  dt_tensor_release(a);
  dt_tensor_release(b);
  dt_tensor_release(c);
  dt_tensor_release(d);
  return st;
}

static dt_status make_model(dt_module **out) {
  dt_module *m = NULL, *tok = NULL, *norm = NULL, *w1 = NULL, *w2 = NULL;
  dt_status st = dt_module_create("TinyLM", model_forward, NULL, &m);
  if (!st) st = dt_nn_embedding(VOCAB, HIDDEN, 5, &tok);
  if (!st) st = dt_module_add_child(m, "tok", tok);
  if (!st) st = dt_nn_layer_norm(HIDDEN, 1e-5, &norm);
  if (!st) st = dt_module_add_child(m, "norm", norm);
  if (!st) st = dt_nn_linear(HIDDEN, FFN, true, 6, &w1);
  if (!st) st = dt_module_add_child(m, "w1", w1);
  if (!st) st = dt_nn_linear(FFN, HIDDEN, true, 7, &w2);
  if (!st) st = dt_module_add_child(m, "w2", w2);
  if (!st) { /* an affine LayerNorm that does something */
    dt_tensor *g = ref_random(1, (int64_t[]){HIDDEN}, DT_F32, 0.5, 1.5, 8);
    dt_tensor *b = ref_random(1, (int64_t[]){HIDDEN}, DT_F32, -0.5, 0.5, 9);
    st = dt_module_set_tensor(norm, "weight", g);
    if (!st) st = dt_module_set_tensor(norm, "bias", b);
    dt_tensor_release(g);
    dt_tensor_release(b);
  }
  if (st)
    dt_module_destroy(m);
  else
    *out = m;
  return st;
}

static const char *const PARAMS[] = {"tok.weight", "norm.weight", "norm.bias", "w1.weight",
                                     "w1.bias",    "w2.weight",   "w2.bias"};
#define N_PARAMS ((int)(sizeof PARAMS / sizeof PARAMS[0]))

static dt_status set_requires_grad(dt_module *m) {
  for (int i = 0; i < N_PARAMS; i++) {
    dt_status st = dt_tensor_set_requires_grad(dt_module_get_tensor(m, PARAMS[i]), true);
    if (st) return st;
  }
  return DT_OK;
}

/* Forward (its collectives recorded in *ledger when ledger is not NULL), mse loss against
 * target, backward. *y: the output (local). */
static dt_status run(dt_module *m, dt_tensor *idx, dt_tensor *target, dt_tensor **y,
                     dt_comm_ledger **ledger) {
  dt_tensor *loss = NULL;
  dt_status st = ledger ? dt_comm_ledger_start(ledger) : DT_OK;
  if (!st) st = dt_module_forward(m, idx, y);
  if (ledger && *ledger) {
    dt_status s2 = dt_comm_ledger_stop(*ledger);
    if (!st) st = s2;
  }
  if (!st) st = dt_mse_loss(*y, target, DT_LOSS_MEAN, &loss);
  if (!st) st = dt_backward(loss, NULL);
  dt_tensor_release(loss);
  return st;
}

static double rel_diff(const dt_tensor *a, const dt_tensor *b) {
  if (dt_tensor_numel(a) != dt_tensor_numel(b)) return INFINITY;
  double *x = ref_values(a), *y = ref_values(b), num = 0, den = 0;
  for (int64_t i = 0; i < dt_tensor_numel(a); i++) {
    num = fmax(num, fabs(x[i] - y[i]));
    den = fmax(den, fabs(y[i]));
  }
  free(x);
  free(y);
  return num / fmax(den, 1e-30);
}

typedef struct variant {
  int seq;                   /* the sequence length (3: uneven over 2 ranks) */
  bool embedding_keeps_dist; /* the embedding's Shard(1) output stays distributed */
  bool two_d;                /* 2x2 ("dp", "tp"), the batch Shard(0) over dp; else 1-D "tp" */
} variant;

static dt_status styles_rank(dt_comm *world, void *arg) {
  const variant *v = arg;
  int64_t ishape[2] = {BATCH, v->seq}, oshape[3] = {BATCH, v->seq, HIDDEN};
  double iv[BATCH * 8];
  for (int i = 0; i < BATCH * v->seq; i++) iv[i] = (i * 5 + 3) % VOCAB;
  dt_tensor *idx = ref_tensor(2, ishape, DT_I64, iv);
  dt_tensor *target = ref_random(3, oshape, DT_F32, -1, 1, 21);

  /* The reference: the same model on one rank, full tensors. */
  dt_module *ref = NULL, *model = NULL;
  dt_tensor *yref = NULL, *y = NULL;
  RANK_OK(make_model(&ref));
  RANK_OK(set_requires_grad(ref));
  RANK_OK(run(ref, idx, target, &yref, NULL));

  dt_mesh *mesh = NULL;
  int tp = v->two_d ? 1 : 0; /* the styles apply on the last mesh dim */
  if (v->two_d) {
    RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, (const char *const[]){"dp", "tp"}, &mesh));
    /* Each dp group gets half the batch: the inputs and the target are split over dp. */
    dt_placement batch[2] = {dt_shard(0), dt_replicate()};
    dt_tensor *didx = NULL, *dtarget = NULL;
    RANK_OK(dt_dist_distribute_tensor(mesh, idx, 2, batch, &didx));
    RANK_OK(dt_dist_distribute_tensor(mesh, target, 2, batch, &dtarget));
    dt_tensor_release(idx);
    dt_tensor_release(target);
    idx = didx, target = dtarget;
  } else {
    RANK_OK(
        dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, (const char *const[]){"tp"}, &mesh));
  }
  RANK_OK(make_model(&model));
  dt_tp_plan_entry entries[] = {{"tok", DT_TP_ROWWISE},
                                {"norm", DT_TP_SEQUENCE_PARALLEL},
                                {"w1", DT_TP_COLWISE},
                                {"w2", DT_TP_ROWWISE}};
  dt_placement seq_shard = dt_shard(1);
  dt_tp_style_options opts[4] = {
      {.output_layout = &seq_shard, .keep_distributed_output = v->embedding_keeps_dist},
      {0},
      {.input_layout = &seq_shard},
      {0}};
  dt_tp_plan plan = {4, entries};
  RANK_OK(dt_parallel_tp_module(model, mesh, &plan, opts));
  RANK_OK(set_requires_grad(model));
  RANK_CHECK(dt_dist_placements(dt_module_get_tensor(model, "tok.weight"))[tp].kind == DT_SHARD &&
                 dt_dist_placements(dt_module_get_tensor(model, "tok.weight"))[tp].dim == 0,
             "vocabulary-parallel weight is Shard(0)");
  RANK_CHECK(dt_dist_placements(dt_module_get_tensor(model, "norm.weight"))[tp].kind ==
                 DT_REPLICATE,
             "sequence-parallel LayerNorm weight is Replicate");
  dt_comm_ledger *ledger = NULL;
  RANK_OK(run(model, idx, target, &y, &ledger));
  /* On 2x2 the output keeps the batch split over dp (a local piece could not say so). */
  RANK_CHECK(dt_tensor_is_distributed(y) == v->two_d, "the rowwise output is local on 1-D");
  /* The forward's collectives, as PyTorch's sequence parallelism: the embedding's Partial
   * reduce-scattered to the sequence shards, those all-gathered before w1 (not w1's weight),
   * w2's Partial all-reduced. */
  char table[400]; /* the first rows; RANK_CHECK messages are short */
  RANK_OK(dt_comm_ledger_format(ledger, table, sizeof table));
  if (getenv("TP_STYLES_DEBUG")) fprintf(stderr, "%s\n", table);
  /* One [batch, seq, hidden] in bytes, per dp group (all the tp collectives run there). */
  int64_t act = (int64_t)(v->two_d ? BATCH / 2 : BATCH) * v->seq * HIDDEN * 4;
  RANK_CHECK(dt_comm_ledger_count(ledger, NULL) == 3 &&
                 dt_comm_ledger_count(ledger, "all_reduce") == 1 &&
                 dt_comm_ledger_bytes(ledger, NULL) == 3 * act,
             "forward collectives:\n%s", table);
  dt_comm_ledger_destroy(ledger);

  if (v->two_d) {
    dt_tensor *full = NULL;
    RANK_OK(dt_dist_full_tensor(y, &full));
    dt_tensor_release(y);
    y = full;
  }
  double d = rel_diff(y, yref);
  RANK_CHECK(d <= 1e-5, "seq %d: output rel diff %g", v->seq, d);

  /* Every gradient: sharded ones keep their parameter's placement; gathered, each equals
   * the reference's (a Partial one is summed by full_tensor). */
  for (int i = 0; i < N_PARAMS; i++) {
    dt_tensor *p = dt_module_get_tensor(model, PARAMS[i]), *g = NULL, *full = NULL, *gref = NULL;
    RANK_OK(dt_tensor_grad(p, &g));
    RANK_CHECK(g && dt_tensor_is_distributed(g), "%s: distributed gradient", PARAMS[i]);
    dt_placement pp = dt_dist_placements(p)[tp], gp = dt_dist_placements(g)[tp];
    if (pp.kind == DT_SHARD) {
      RANK_CHECK(gp.kind == DT_SHARD && gp.dim == pp.dim, "%s: gradient stays S(%d), got kind %d",
                 PARAMS[i], pp.dim, (int)gp.kind);
    } else {
      RANK_CHECK(gp.kind == DT_REPLICATE || gp.kind == DT_PARTIAL,
                 "%s: gradient R or P, got kind %d", PARAMS[i], (int)gp.kind);
    }
    RANK_OK(dt_dist_full_tensor(g, &full));
    RANK_OK(dt_tensor_grad(dt_module_get_tensor(ref, PARAMS[i]), &gref));
    double e = rel_diff(full, gref);
    RANK_CHECK(e <= 1e-5, "seq %d: %s gradient rel diff %g", v->seq, PARAMS[i], e);
    dt_tensor_release(g);
    dt_tensor_release(full);
    dt_tensor_release(gref);
  }
  /* The optimizer reduces the LayerNorm's Partial gradients to Replicate: one SGD step on
   * each model leaves every parameter, gathered, equal to the reference's. */
  dt_tensor *pp[N_PARAMS], *rp[N_PARAMS];
  for (int i = 0; i < N_PARAMS; i++) {
    pp[i] = dt_module_get_tensor(model, PARAMS[i]);
    rp[i] = dt_module_get_tensor(ref, PARAMS[i]);
  }
  dt_optimizer *opt = NULL, *ropt = NULL;
  dt_sgd_options sgd = {.lr = 0.5};
  RANK_OK(dt_optimizer_create_sgd(N_PARAMS, pp, &sgd, &opt));
  RANK_OK(dt_optimizer_create_sgd(N_PARAMS, rp, &sgd, &ropt));
  RANK_OK(dt_optimizer_step(opt));
  RANK_OK(dt_optimizer_step(ropt));
  for (int i = 0; i < N_PARAMS; i++) {
    dt_tensor *full = NULL;
    RANK_OK(dt_dist_full_tensor(pp[i], &full));
    double e = rel_diff(full, rp[i]);
    RANK_CHECK(e <= 1e-5, "seq %d: %s after a step rel diff %g", v->seq, PARAMS[i], e);
    for (int m = 0; m <= tp; m++)
      RANK_CHECK(dt_dist_placements(pp[i])[m].kind != DT_PARTIAL, "%s stays R or S", PARAMS[i]);
    dt_tensor_release(full);
  }
  dt_optimizer_destroy(opt);
  dt_optimizer_destroy(ropt);
  dt_tensor_release(y);
  dt_tensor_release(yref);
  dt_module_destroy(model);
  dt_module_destroy(ref);
  dt_mesh_destroy(mesh);
  dt_tensor_release(idx);
  dt_tensor_release(target);
  return DT_OK;
}

Test(tp_styles, embedding_sequence_parallel_mlp_matches_unparallelized) {
  variant v = {.seq = 4, .embedding_keeps_dist = false};
  SPAWN_OK(2, styles_rank, &v);
}

Test(tp_styles, distributed_sequence_shards_uneven) {
  variant v = {.seq = 3, .embedding_keeps_dist = true};
  SPAWN_OK(2, styles_rank, &v);
}

/* The same model on 2x2: the styles on "tp", the batch over "dp"; the gradients of the
 * parameters (Replicate over dp) come Partial over dp and the optimizer reduces them. */
Test(tp_styles, two_d_mesh_batch_over_dp) {
  variant v = {.seq = 4, .embedding_keeps_dist = true, .two_d = true};
  SPAWN_OK(4, styles_rank, &v);
}

Test(tp_styles, two_d_mesh_uneven_sequence) {
  variant v = {.seq = 3, .embedding_keeps_dist = true, .two_d = true};
  SPAWN_OK(4, styles_rank, &v);
}

/* Colwise on an Embedding: weight Shard(1) (the embedding dim), output Shard(-1), here
 * asked Replicate so the output is the whole lookup; its gradient stays Shard(1). */
static dt_status colwise_embedding_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_module *ref = NULL, *emb = NULL;
  dt_mesh *mesh = NULL;
  dt_tensor *idx = ref_tensor(2, (int64_t[]){2, 3}, DT_I64, (double[]){0, 6, 2, 2, 5, 1});
  dt_tensor *target = ref_random(3, (int64_t[]){2, 3, 5}, DT_F32, -1, 1, 4);
  dt_tensor *y = NULL, *yref = NULL, *loss = NULL, *g = NULL, *gfull = NULL, *gref = NULL;
  RANK_OK(dt_nn_embedding(VOCAB, 5, 12, &ref));
  RANK_OK(dt_nn_embedding(VOCAB, 5, 12, &emb));
  RANK_OK(dt_tensor_set_requires_grad(dt_module_get_tensor(ref, "weight"), true));
  RANK_OK(dt_module_forward(ref, idx, &yref));
  RANK_OK(dt_mse_loss(yref, target, DT_LOSS_SUM, &loss));
  RANK_OK(dt_backward(loss, NULL));
  dt_tensor_release(loss);
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  dt_tp_plan_entry e[] = {{"", DT_TP_COLWISE}};
  dt_tp_plan plan = {1, e};
  dt_tp_style_options o = {.output_layout = &(dt_placement){.kind = DT_REPLICATE}};
  RANK_OK(dt_parallel_tp_module(emb, mesh, &plan, &o));
  dt_tensor *w = dt_module_get_tensor(emb, "weight");
  RANK_CHECK(dt_dist_placements(w)[0].kind == DT_SHARD && dt_dist_placements(w)[0].dim == 1,
             "colwise embedding weight S(1)");
  RANK_OK(dt_tensor_set_requires_grad(w, true));
  RANK_OK(dt_module_forward(emb, idx, &y));
  RANK_CHECK(!dt_tensor_is_distributed(y) && rel_diff(y, yref) <= 1e-6, "colwise lookup");
  RANK_OK(dt_mse_loss(y, target, DT_LOSS_SUM, &loss));
  RANK_OK(dt_backward(loss, NULL));
  RANK_OK(dt_tensor_grad(w, &g));
  RANK_CHECK(g && dt_dist_placements(g)[0].kind == DT_SHARD && dt_dist_placements(g)[0].dim == 1,
             "gradient stays S(1)");
  RANK_OK(dt_dist_full_tensor(g, &gfull));
  RANK_OK(dt_tensor_grad(dt_module_get_tensor(ref, "weight"), &gref));
  double d = rel_diff(gfull, gref);
  RANK_CHECK(d <= 1e-5, "colwise embedding gradient rel diff %g", d);
  dt_tensor_release(loss);
  dt_tensor_release(g);
  dt_tensor_release(gfull);
  dt_tensor_release(gref);
  dt_tensor_release(y);
  dt_tensor_release(yref);
  dt_tensor_release(idx);
  dt_tensor_release(target);
  dt_module_destroy(emb);
  dt_module_destroy(ref);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(tp_styles, colwise_embedding) { SPAWN_OK(2, colwise_embedding_rank, NULL); }

static dt_status bad_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_module *model = NULL, *bn = NULL;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  RANK_OK(make_model(&model));
  RANK_OK(dt_nn_batch_norm1d(HIDDEN, 1e-5, &bn));
  RANK_OK(dt_module_add_child(model, "bn", bn));
  dt_tp_plan_entry lin[] = {{"w1", DT_TP_SEQUENCE_PARALLEL}};
  dt_tp_plan p1 = {1, lin};
  RANK_CHECK(dt_parallel_tp_module(model, mesh, &p1, NULL) == DT_ERR_UNSUPPORTED, "SP on Linear");
  RANK_CHECK(strstr(dt_last_error(), "dt_parallel_tp_module") &&
                 strstr(dt_last_error(), "sequence_parallel style on 'w1', a Linear"),
             "%s", dt_last_error());
  dt_tp_plan_entry bnp[] = {{"bn", DT_TP_SEQUENCE_PARALLEL}};
  dt_tp_plan p2 = {1, bnp};
  RANK_CHECK(dt_parallel_tp_module(model, mesh, &p2, NULL) == DT_ERR_UNSUPPORTED, "SP on BN");
  RANK_CHECK(strstr(dt_last_error(), "'bn', a BatchNorm1d"), "%s", dt_last_error());
  dt_tp_plan_entry ln[] = {{"norm", DT_TP_ROWWISE}};
  dt_tp_plan p3 = {1, ln};
  RANK_CHECK(dt_parallel_tp_module(model, mesh, &p3, NULL) == DT_ERR_UNSUPPORTED, "rowwise on LN");
  RANK_CHECK(strstr(dt_last_error(), "rowwise style on 'norm', a LayerNorm"), "%s",
             dt_last_error());
  /* A failed plan changed nothing; a later entry failing leaves the earlier ones local. */
  dt_tp_plan_entry mixed[] = {{"norm", DT_TP_SEQUENCE_PARALLEL}, {"bn", DT_TP_SEQUENCE_PARALLEL}};
  dt_tp_plan p4 = {2, mixed};
  RANK_CHECK(dt_parallel_tp_module(model, mesh, &p4, NULL) == DT_ERR_UNSUPPORTED, "mixed");
  RANK_CHECK(!dt_tensor_is_distributed(dt_module_get_tensor(model, "norm.weight")),
             "nothing replaced");
  RANK_CHECK(strcmp(dt_parallel_tp_style_name(DT_TP_SEQUENCE_PARALLEL), "sequence_parallel") == 0,
             "style name");
  /* Parallelized twice. */
  dt_tp_plan_entry once[] = {{"norm", DT_TP_SEQUENCE_PARALLEL}};
  dt_tp_plan p5 = {1, once};
  RANK_OK(dt_parallel_tp_module(model, mesh, &p5, NULL));
  RANK_CHECK(dt_parallel_tp_module(model, mesh, &p5, NULL) == DT_ERR_INVALID, "twice");
  RANK_CHECK(strstr(dt_last_error(), "parallelized twice"), "%s", dt_last_error());
  /* A local input to the sequence-parallel region with a 1-D shape has no sequence dim. */
  dt_tensor *x = ref_random(1, (int64_t[]){HIDDEN}, DT_F32, -1, 1, 3), *y = NULL;
  RANK_CHECK(dt_module_forward(dt_module_find(model, "norm"), x, &y) == DT_ERR_INVALID && !y,
             "S(1) of a 1-D input");
  RANK_CHECK(strstr(dt_last_error(), "S(1)") && strstr(dt_last_error(), "'norm'"), "%s",
             dt_last_error());
  dt_tensor_release(x);
  dt_module_destroy(model);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(tp_styles, bad_styles) { SPAWN_OK(2, bad_rank, NULL); }

/* The graph path has colwise and rowwise Linear only: a sequence-parallel entry is refused. */
Test(tp_styles, transform_refuses_sequence_parallel) {
  dt_module *norm = NULL;
  cr_assert_eq(dt_nn_layer_norm(HIDDEN, 1e-5, &norm), DT_OK);
  dt_tensor *x = ref_random(3, (int64_t[]){2, 4, HIDDEN}, DT_F32, -1, 1, 5);
  dt_program *p = NULL, *out = NULL;
  cr_assert_eq(dt_export(norm, x, NULL, &p), DT_OK, "%s", dt_last_error());
  dt_tp_plan_entry e[] = {{"", DT_TP_SEQUENCE_PARALLEL}};
  dt_tp_plan plan = {1, e};
  cr_assert_eq(dt_parallel_tp_transform(p, 0, 2, &plan, &out), DT_ERR_UNSUPPORTED, "%s",
               dt_last_error());
  cr_assert_null(out);
  cr_assert(strstr(dt_last_error(), "dt_parallel_tp_transform: sequence_parallel style"), "%s",
            dt_last_error());
  dt_program_destroy(p);
  dt_tensor_release(x);
  dt_module_destroy(norm);
}
