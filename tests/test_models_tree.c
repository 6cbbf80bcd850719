/*
 * The models are module trees (issue 36 item 2): the parameters dt_hf_model_param lists are the
 * tree's, in its order, under Hugging Face's names (GPT-2's c_attn split into q/k/v, its Conv1D
 * weights held transposed as Linears), every one a checkpoint tensor's values (the adapter:
 * compared against the file); and the architecture's plan table places them (TP 2: colwise
 * Shard(0), rowwise Shard(1), vocabulary Shard(0); FSDP 2 x TP 2: the dp shard on the first
 * dim TP leaves alone); with sequence parallelism the reductions become reduce-scatters.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"

#define HF DT_FIXTURES_DIR "/hf"

static bool hf_present(void) {
  FILE *f = fopen(HF "/expected.json", "r");
  if (f) fclose(f);
  return f != NULL;
}

static int find(dt_hf_model *m, const char *name) {
  for (int i = 0; i < dt_hf_model_param_count(m); i++) {
    const char *n = NULL;
    dt_hf_model_param(m, i, &n);
    if (!strcmp(n, name)) return i;
  }
  return -1;
}

/* max |param - want| where want is the file's tensor `file_name`, its third `part` (-1: all)
 * of the last dim, transposed when asked. */
static double diff_to_file(dt_tensor *p, const char *dir, const char *file_name, int part,
                           bool transposed) {
  /* The fixture is sharded over ten files: the one holding the tensor. */
  dt_safetensors *f = NULL;
  dt_tensor *w = NULL, *third = NULL, *t = NULL, *c = NULL, *pc = NULL;
  for (int i = 1; i <= 10 && !w; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/model-%05d-of-00010.safetensors", dir, i);
    cr_assert_eq(dt_safetensors_open(path, &f), DT_OK, "%s", dt_last_error());
    if (dt_safetensors_find(f, file_name) >= 0)
      cr_assert_eq(dt_safetensors_load(f, file_name, DT_SAFETENSORS_COPY, &w), DT_OK, "%s",
                   dt_last_error());
    dt_safetensors_destroy(f);
  }
  cr_assert_not_null(w, "no file holds %s", file_name);
  int last = dt_tensor_ndim(w) - 1;
  int64_t n = dt_tensor_size(w, last) / (part >= 0 ? 3 : 1);
  cr_assert_eq(dt_narrow(w, last, part >= 0 ? part * n : 0, n, &third), DT_OK);
  if (transposed)
    cr_assert_eq(dt_transpose(third, 0, 1, &t), DT_OK);
  else
    t = dt_tensor_retain(third);
  cr_assert_eq(dt_contiguous(t, &c), DT_OK);
  cr_assert_eq(dt_contiguous(p, &pc), DT_OK);
  cr_assert_eq(dt_tensor_ndim(pc), dt_tensor_ndim(c));
  for (int d = 0; d < dt_tensor_ndim(c); d++)
    cr_assert_eq(dt_tensor_size(pc, d), dt_tensor_size(c, d), "%s dim %d", file_name, d);
  int64_t k = dt_tensor_numel(c);
  double *a = malloc(sizeof(double) * (size_t)k), *b = malloc(sizeof(double) * (size_t)k);
  cr_assert_eq(dt_tensor_to_doubles(pc, a, k), DT_OK);
  cr_assert_eq(dt_tensor_to_doubles(c, b, k), DT_OK);
  double md = 0;
  for (int64_t i = 0; i < k; i++) md = fmax(md, fabs(a[i] - b[i]));
  free(a), free(b);
  dt_tensor_release(w), dt_tensor_release(third), dt_tensor_release(t), dt_tensor_release(c);
  dt_tensor_release(pc);
  return md;
}

Test(models_tree, gpt2_parameters_are_the_tree_under_hugging_face_names) {
  if (!hf_present()) cr_skip_test("the hf fixtures are absent (%s)", HF);
  const char *dir = HF "/gpt2_tiny";
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  /* wte, wpe; per layer ln_1 (2), q/k/v/c_proj (8), ln_2 (2), c_fc/c_proj (4); ln_f (2); the
   * head is tied. */
  cr_assert_eq(dt_hf_model_param_count(m), 2 + 2 * 16 + 2);
  const char *first = NULL;
  dt_hf_model_param(m, 0, &first);
  cr_assert_str_eq(first, "transformer.wte.weight");
  static const struct {
    const char *name, *file;
    int part;
    bool transposed;
    int64_t rows, cols;
  } cases[] = {
      {"transformer.h.0.attn.c_attn.weight#q", "transformer.h.0.attn.c_attn.weight", 0, true, 64,
       64},
      {"transformer.h.1.attn.c_attn.weight#v", "transformer.h.1.attn.c_attn.weight", 2, true, 64,
       64},
      {"transformer.h.1.attn.c_attn.bias#k", "transformer.h.1.attn.c_attn.bias", 1, false, 64, 0},
      {"transformer.h.0.mlp.c_fc.weight", "transformer.h.0.mlp.c_fc.weight", -1, true, 256, 64},
      {"transformer.h.0.mlp.c_proj.weight", "transformer.h.0.mlp.c_proj.weight", -1, true, 64, 256},
      {"transformer.h.1.attn.c_proj.weight", "transformer.h.1.attn.c_proj.weight", -1, true, 64,
       64},
      {"transformer.wpe.weight", "transformer.wpe.weight", -1, false, 256, 64},
      {"transformer.ln_f.bias", "transformer.ln_f.bias", -1, false, 64, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int k = find(m, cases[i].name);
    cr_assert_geq(k, 0, "no parameter %s", cases[i].name);
    dt_tensor *p = dt_hf_model_param(m, k, NULL);
    cr_assert_eq(dt_tensor_size(p, 0), cases[i].rows, "%s", cases[i].name);
    if (cases[i].cols) cr_assert_eq(dt_tensor_size(p, 1), cases[i].cols, "%s", cases[i].name);
    double d = diff_to_file(p, dir, cases[i].file, cases[i].part, cases[i].transposed);
    cr_assert(d == 0, "%s differs from the checkpoint by %g", cases[i].name, d);
  }
  cr_assert_lt(find(m, "lm_head.weight"), 0, "a tied head is listed");
  dt_hf_model_destroy(m);
}

static bool placed(dt_tensor *t, int mesh_dim, dt_placement_kind kind, int dim) {
  if (!dt_tensor_is_distributed(t)) return false;
  dt_placement p = dt_dist_placements(t)[mesh_dim];
  return p.kind == kind && (kind != DT_SHARD || p.dim == dim);
}

static dt_status plan_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_hf_model *m = NULL;
  RANK_OK(dt_mesh_create(world, 2, (int[]){2, 2}, (const char *[]){"dp", "tp"}, &mesh));
  dt_hf_plan plan = {.tp = "tp", .fsdp = "dp"};
  RANK_OK(dt_hf_model_load(HF "/llama_tiny", mesh, &plan, &m));
  static const struct {
    const char *name;
    int tp_dim, dp_dim; /* -1: Replicate */
  } cases[] = {
      {"model.embed_tokens.weight", 0, 1},
      {"model.layers.0.self_attn.q_proj.weight", 0, 1},
      {"model.layers.1.self_attn.v_proj.weight", 0, 1},
      {"model.layers.1.self_attn.o_proj.weight", 1, 0},
      {"model.layers.0.mlp.up_proj.weight", 0, 1},
      {"model.layers.0.mlp.down_proj.weight", 1, 0},
      {"model.layers.1.input_layernorm.weight", -1, 0},
      {"model.norm.weight", -1, 0},
      {"lm_head.weight", 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int k = find(m, cases[i].name);
    RANK_CHECK(k >= 0, "no parameter %s", cases[i].name);
    dt_tensor *t = dt_hf_model_param(m, k, NULL);
    int tp = cases[i].tp_dim, dp = cases[i].dp_dim;
    RANK_CHECK(placed(t, 1, tp < 0 ? DT_REPLICATE : DT_SHARD, tp), "%s: tp placement",
               cases[i].name);
    RANK_CHECK(placed(t, 0, DT_SHARD, dp), "%s: dp placement", cases[i].name);
  }
  dt_hf_model_destroy(m);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(models_tree, llama_plan_table_places_every_parameter) {
  if (!hf_present()) cr_skip_test("the hf fixtures are absent (%s)", HF);
  SPAWN_OK(4, plan_rank, NULL);
}

/* Collectives of one forward of 8 positions on TP 2, by kind: *rs reduce-scatters, *ar
 * all-reduces; the ledger's table in `table`. */
static dt_status forward_collectives(dt_mesh *mesh, bool sp, int64_t *rs, int64_t *ar, char *table,
                                     size_t size) {
  dt_hf_model *m = NULL;
  dt_hf_plan plan = {.tp = "tp", .sequence_parallel = sp};
  RANK_OK(dt_hf_model_load(HF "/llama_tiny", mesh, &plan, &m));
  int64_t v[8] = {1, 5, 9, 3, 7, 2, 8, 4};
  dt_tensor *ids = NULL, *logits = NULL;
  RANK_OK(dt_from_data(v, 2, (int64_t[]){1, 8}, DT_I64, &ids));
  dt_comm_ledger *ledger = NULL;
  RANK_OK(dt_comm_ledger_start(&ledger));
  dt_status st = dt_hf_model_forward(m, ids, NULL, &logits);
  RANK_OK(dt_comm_ledger_stop(ledger));
  RANK_OK(st);
  *rs = dt_comm_ledger_count(ledger, "reduce_scatter_uneven");
  *ar = dt_comm_ledger_count(ledger, "all_reduce");
  dt_comm_ledger_format(ledger, table, size);
  dt_comm_ledger_destroy(ledger);
  dt_tensor_release(ids), dt_tensor_release(logits);
  dt_hf_model_destroy(m);
  return DT_OK;
}

static dt_status sp_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"tp"}, &mesh));
  int64_t rs = 0, ar = 0, rs_sp = 0, ar_sp = 0;
  char table[400], table_sp[400];
  RANK_OK(forward_collectives(mesh, false, &rs, &ar, table, sizeof table));
  RANK_OK(forward_collectives(mesh, true, &rs_sp, &ar_sp, table_sp, sizeof table_sp));
  /* Megatron's reductions: the embedding and each layer's o_proj and down_proj (2 layers).
   * Without sequence parallelism each is an all-reduce; with it a reduce-scatter over the
   * sequence, and no all-reduce is left. */
  RANK_CHECK(ar == 5 && rs == 0, "TP 2: %lld all-reduces, %lld reduce-scatters:\n%s", (long long)ar,
             (long long)rs, table);
  RANK_CHECK(ar_sp == 0 && rs_sp == 5, "TP 2 + SP: %lld all-reduces, %lld reduce-scatters:\n%s",
             (long long)ar_sp, (long long)rs_sp, table_sp);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(models_tree, sequence_parallel_reduce_scatters_the_residual_stream) {
  if (!hf_present()) cr_skip_test("the hf fixtures are absent (%s)", HF);
  SPAWN_OK(2, sp_rank, NULL);
}

Test(models_tree, sequence_parallel_without_tp_is_refused) {
  if (!hf_present()) cr_skip_test("the hf fixtures are absent (%s)", HF);
  dt_hf_model *m = NULL;
  dt_hf_plan plan = {.sequence_parallel = true};
  cr_assert_eq(dt_hf_model_load(HF "/llama_tiny", NULL, &plan, &m), DT_ERR_INVALID);
  cr_assert_null(m);
  cr_assert(strstr(dt_last_error(), "plan.sequence_parallel needs plan.tp"), "%s", dt_last_error());
}

/* A mesh with a zero plan replicates the model (the placeholders made whole on every rank):
 * the logits equal the 1-rank model's. */
static dt_status replicated_rank(dt_comm *world, void *arg) {
  const double *want = arg;
  dt_mesh *mesh = NULL;
  dt_hf_model *m = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"dp"}, &mesh));
  RANK_OK(dt_hf_model_load(HF "/gpt2_tiny", mesh, &(dt_hf_plan){0}, &m));
  int64_t v[4] = {1, 5, 9, 3};
  dt_tensor *ids = NULL, *logits = NULL, *full = NULL;
  RANK_OK(dt_from_data(v, 2, (int64_t[]){1, 4}, DT_I64, &ids));
  RANK_OK(dt_hf_model_forward(m, ids, NULL, &logits));
  RANK_CHECK(dt_tensor_is_distributed(logits), "the logits of a model on a mesh are local");
  RANK_OK(dt_dist_full_tensor(logits, &full));
  static double got[4 * 256];
  RANK_OK(dt_tensor_to_doubles(full, got, 4 * 256));
  for (int i = 0; i < 4 * 256; i++)
    RANK_CHECK(fabs(got[i] - want[i]) <= 1e-5 * (1 + fabs(want[i])), "logit %d: %.7g, 1 rank %.7g",
               i, got[i], want[i]);
  dt_tensor_release(ids), dt_tensor_release(logits), dt_tensor_release(full);
  dt_hf_model_destroy(m);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(models_tree, a_zero_plan_on_a_mesh_replicates_the_model) {
  if (!hf_present()) cr_skip_test("the hf fixtures are absent (%s)", HF);
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(HF "/gpt2_tiny", NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  int64_t v[4] = {1, 5, 9, 3};
  dt_tensor *ids = NULL, *logits = NULL;
  cr_assert_eq(dt_from_data(v, 2, (int64_t[]){1, 4}, DT_I64, &ids), DT_OK);
  cr_assert_eq(dt_hf_model_forward(m, ids, NULL, &logits), DT_OK, "%s", dt_last_error());
  static double want[4 * 256];
  cr_assert_eq(dt_tensor_to_doubles(logits, want, 4 * 256), DT_OK);
  dt_tensor_release(ids), dt_tensor_release(logits);
  dt_hf_model_destroy(m);
  SPAWN_OK(2, replicated_rank, want);
}
