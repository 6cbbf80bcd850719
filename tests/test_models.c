/*
 * Hugging Face models (src/models/): the tiny Llama and GPT-2 of ../shared/fixtures/hf
 * (written by transformers) loaded on 1 rank, TP 2 and 4, FSDP 2 and 2x2, checked against the
 * logits, the greedy generation and the five fine-tuning losses transformers computed.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"
#include "hf_fixture_checks.h"
#include "models_reference.h"
#include "fixture_main.h"

Test(models, llama_one_rank_logits_generation_finetune) {
  SKIP_WITHOUT_FIXTURES();
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(HF "/llama_tiny", NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  cr_assert_eq(check_logits(m, "llama_tiny"), DT_OK, "%s", dt_last_error());
  cr_assert_eq(check_greedy(m, "llama_tiny"), DT_OK, "%s", dt_last_error());
  cr_assert_eq(check_finetune(m, "llama_tiny"), DT_OK, "%s", dt_last_error());
  dt_hf_model_destroy(m);
}

Test(models, gpt2_one_rank_logits_generation_finetune) {
  SKIP_WITHOUT_FIXTURES();
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(HF "/gpt2_tiny", NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  cr_assert_eq(check_logits(m, "gpt2_tiny"), DT_OK, "%s", dt_last_error());
  cr_assert_eq(check_greedy(m, "gpt2_tiny"), DT_OK, "%s", dt_last_error());
  cr_assert_eq(check_finetune(m, "gpt2_tiny"), DT_OK, "%s", dt_last_error());
  dt_hf_model_destroy(m);
}

/* One parallel configuration: a mesh of dims (names "dp", "tp"), the plan, the checks. */
typedef struct par_case {
  const char *model;
  int ndim;
  int shape[2];
  const char *names[2];
  dt_hf_plan plan;
  bool generate;
  bool finetune;
} par_case;

static dt_status par_rank(dt_comm *world, void *arg) {
  const par_case *c = arg;
  dt_mesh *mesh = NULL;
  dt_hf_model *m = NULL;
  char dir[256];
  snprintf(dir, sizeof dir, HF "/%s", c->model);
  RANK_OK(dt_mesh_create(world, c->ndim, c->shape, c->names, &mesh));
  RANK_OK(dt_hf_model_load(dir, mesh, &c->plan, &m));
  RANK_OK(check_logits(m, c->model));
  if (c->generate) RANK_OK(check_greedy(m, c->model));
  if (c->finetune) RANK_OK(check_finetune(m, c->model));
  dt_hf_model_destroy(m);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void run_case(par_case c) {
  if (!hf_present()) cr_skip_test("the hf fixtures are absent (%s)", HF);
  int world = c.ndim == 1 ? c.shape[0] : c.shape[0] * c.shape[1];
  SPAWN_OK(world, par_rank, &c);
}

#define TP1(n) .ndim = 1, .shape = {n}, .names = {"tp"}, .plan = {.tp = "tp"}
#define DP1(n) .ndim = 1, .shape = {n}, .names = {"dp"}, .plan = {.fsdp = "dp"}
#define DP_TP(a, b)                                                                                \
  .ndim = 2, .shape = {a, b}, .names = {"dp", "tp"}, .plan = {.tp = "tp", .fsdp = "dp"}

Test(models, llama_tp2, .timeout = 120) {
  run_case((par_case){.model = "llama_tiny", TP1(2), .generate = true, .finetune = true});
}
Test(models, llama_tp4, .timeout = 120) {
  run_case((par_case){.model = "llama_tiny", TP1(4), .generate = true, .finetune = true});
}
Test(models, llama_fsdp2, .timeout = 120) {
  run_case((par_case){.model = "llama_tiny", DP1(2), .generate = true, .finetune = true});
}
Test(models, llama_fsdp2_tp2, .timeout = 120) {
  run_case((par_case){.model = "llama_tiny", DP_TP(2, 2), .generate = true, .finetune = true});
}
Test(models, gpt2_tp2, .timeout = 120) {
  run_case((par_case){.model = "gpt2_tiny", TP1(2), .generate = true, .finetune = true});
}
Test(models, gpt2_tp4, .timeout = 120) {
  run_case((par_case){.model = "gpt2_tiny", TP1(4), .generate = true, .finetune = true});
}
Test(models, gpt2_fsdp2, .timeout = 120) {
  run_case((par_case){.model = "gpt2_tiny", DP1(2), .generate = true, .finetune = true});
}
Test(models, gpt2_fsdp2_tp2, .timeout = 120) {
  run_case((par_case){.model = "gpt2_tiny", DP_TP(2, 2), .generate = true, .finetune = true});
}

/* Megatron's sequence parallelism (plan.sequence_parallel): the norms and the residual stream
 * sharded over the sequence on tp give transformers' logits, greedy ids (decode steps of one
 * position: ranks holding none) and fine-tuning losses; TP 4 also splits the 5-token prompt
 * unevenly (2, 2, 1, 0). */
#define TP_SP(n)                                                                                   \
  .ndim = 1, .shape = {n}, .names = {"tp"}, .plan = {.tp = "tp", .sequence_parallel = true}
Test(models, llama_tp2_sequence_parallel, .timeout = 120) {
  run_case((par_case){.model = "llama_tiny", TP_SP(2), .generate = true, .finetune = true});
}
Test(models, llama_tp4_sequence_parallel, .timeout = 120) {
  run_case((par_case){.model = "llama_tiny", TP_SP(4), .generate = true, .finetune = true});
}
Test(models, gpt2_tp2_sequence_parallel, .timeout = 120) {
  run_case((par_case){.model = "gpt2_tiny", TP_SP(2), .generate = true, .finetune = true});
}
Test(models, llama_fsdp2_tp2_sequence_parallel, .timeout = 120) {
  run_case((par_case){.model = "llama_tiny",
                      .ndim = 2,
                      .shape = {2, 2},
                      .names = {"dp", "tp"},
                      .plan = {.tp = "tp", .fsdp = "dp", .sequence_parallel = true},
                      .generate = true,
                      .finetune = true});
}

/* ---- Models written by the library at odd sizes, against the naive loops ------------------ */

typedef struct own_case {
  const ref_cfg *cfg;
  char dir[200];
  ref_weights w;
  int ndim;
  int shape[2];
  const char *names[2];
  dt_hf_plan plan;
  char save_dir[200]; /* when set: save there (every rank calls) */
} own_case;

#define OWN_B 3
#define OWN_T 11

static void own_ids(const ref_cfg *c, int64_t *ids) {
  for (int i = 0; i < OWN_B * OWN_T; i++) ids[i] = (i * 7 + 3) % c->V;
}

/* The model's logits of own_ids against ref_forward, row by row, and greedy generation against
 * argmax of the naive forward over the whole sequence at every step. */
static dt_status own_check(dt_hf_model *m, const own_case *oc) {
  const ref_cfg *c = oc->cfg;
  int64_t ids[OWN_B * OWN_T];
  own_ids(c, ids);
  dt_tensor *t = NULL, *logits = NULL, *full = NULL;
  RANK_OK(dt_from_data(ids, 2, (int64_t[]){OWN_B, OWN_T}, DT_I64, &t));
  RANK_OK(dt_hf_model_forward(m, t, NULL, &logits));
  if (dt_tensor_is_distributed(logits)) {
    RANK_OK(dt_dist_full_tensor(logits, &full));
  } else {
    full = dt_tensor_retain(logits);
  }
  int64_t n = OWN_B * OWN_T * c->V;
  double *got = malloc(sizeof(double) * (size_t)n), *want = malloc(sizeof(double) * (size_t)n);
  RANK_OK(dt_tensor_to_doubles(full, got, n));
  for (int b = 0; b < OWN_B; b++)
    ref_forward(c, &oc->w, ids + b * OWN_T, OWN_T, want + b * OWN_T * c->V);
  double md = 0, mx = 0;
  for (int64_t i = 0; i < n; i++)
    md = fmax(md, fabs(got[i] - want[i])), mx = fmax(mx, fabs(want[i]));
  free(got), free(want);
  RANK_CHECK(md <= 1e-4 * mx, "logits differ from the naive loops by %.3g of %.3g", md, mx);
  dt_tensor_release(t), dt_tensor_release(logits), dt_tensor_release(full);
  /* The first sequence in two chunks through a KV cache (6 positions, then 5: the second
   * chunk attends to the cache with the offset causal mask) equals the whole forward. */
  {
    dt_hf_kv_cache *cache = NULL;
    dt_tensor *c1 = NULL, *c2 = NULL, *l1 = NULL, *l2 = NULL, *f2 = NULL;
    RANK_OK(dt_hf_kv_cache_create(m, &cache));
    RANK_OK(dt_from_data(ids, 2, (int64_t[]){1, 6}, DT_I64, &c1));
    RANK_OK(dt_from_data(ids + 6, 2, (int64_t[]){1, OWN_T - 6}, DT_I64, &c2));
    RANK_OK(dt_hf_model_forward(m, c1, cache, &l1));
    RANK_OK(dt_hf_model_forward(m, c2, cache, &l2));
    RANK_CHECK(dt_hf_kv_cache_length(cache) == OWN_T, "cache length %lld",
               (long long)dt_hf_kv_cache_length(cache));
    if (dt_tensor_is_distributed(l2)) {
      RANK_OK(dt_dist_full_tensor(l2, &f2));
    } else {
      f2 = dt_tensor_retain(l2);
    }
    int64_t n2 = (OWN_T - 6) * c->V;
    double *g2 = malloc(sizeof(double) * (size_t)n2),
           *w2 = malloc(sizeof(double) * (size_t)(OWN_T * c->V));
    RANK_OK(dt_tensor_to_doubles(f2, g2, n2));
    ref_forward(c, &oc->w, ids, OWN_T, w2);
    double md2 = 0, mx2 = 0;
    for (int64_t i = 0; i < n2; i++)
      md2 = fmax(md2, fabs(g2[i] - w2[6 * c->V + i])), mx2 = fmax(mx2, fabs(w2[6 * c->V + i]));
    free(g2), free(w2);
    RANK_CHECK(md2 <= 1e-4 * mx2, "chunked logits differ by %.3g of %.3g", md2, mx2);
    dt_tensor_release(c1), dt_tensor_release(c2), dt_tensor_release(l1), dt_tensor_release(l2);
    dt_tensor_release(f2);
    dt_hf_kv_cache_destroy(cache);
  }
  /* greedy: 4-token prompt, 9 new tokens */
  int64_t seq[16] = {5, 1, 4, 2}, out[16], nout = 0;
  RANK_OK(dt_hf_generate(m, seq, 4, 9, NULL, out, &nout, NULL, NULL));
  RANK_CHECK(nout == 13, "generated %lld ids", (long long)nout);
  double *row = malloc(sizeof(double) * (size_t)(16 * c->V));
  for (int64_t len = 4; len < 13; len++) {
    ref_forward(c, &oc->w, seq, len, row);
    int64_t best = 0;
    for (int64_t v = 1; v < c->V; v++)
      if (row[(len - 1) * c->V + v] > row[(len - 1) * c->V + best]) best = v;
    seq[len] = best;
    RANK_CHECK(out[len] == best, "token %lld: %lld, naive loops %lld", (long long)len,
               (long long)out[len], (long long)best);
  }
  free(row);
  return DT_OK;
}

static dt_status own_rank(dt_comm *world, void *arg) {
  own_case *oc = arg;
  dt_mesh *mesh = NULL;
  dt_hf_model *m = NULL;
  if (world) RANK_OK(dt_mesh_create(world, oc->ndim, oc->shape, oc->names, &mesh));
  RANK_OK(dt_hf_model_load(oc->dir, mesh, world ? &oc->plan : NULL, &m));
  RANK_OK(own_check(m, oc));
  if (oc->save_dir[0]) RANK_OK(dt_hf_model_save(m, oc->save_dir));
  dt_hf_model_destroy(m);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void own_setup(own_case *oc, const ref_cfg *c, uint64_t seed) {
  oc->cfg = c;
  snprintf(oc->dir, sizeof oc->dir, "/tmp/dt_models_XXXXXX");
  cr_assert_not_null(mkdtemp(oc->dir));
  ref_make(c, seed, &oc->w);
  cr_assert_eq(ref_write(c, &oc->w, oc->dir), DT_OK, "%s", dt_last_error());
}

static void remove_dir(const char *dir) {
  char path[512];
  const char *files[] = {"config.json", "model.safetensors"};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    remove(path);
  }
  remove(dir);
}

static void own_teardown(own_case *oc) {
  remove_dir(oc->dir);
  ref_free(&oc->w);
}

static void own_run(const ref_cfg *c, int world) {
  own_case oc = {0};
  own_setup(&oc, c, 11);
  cr_assert_eq(own_rank(NULL, &oc), DT_OK, "1 rank: %s", dt_last_error());
  if (world == 4) {
    own_case tp = oc;
    tp.ndim = 1, tp.shape[0] = 4, tp.names[0] = "tp", tp.plan = (dt_hf_plan){.tp = "tp"};
    SPAWN_OK(4, own_rank, &tp);
    own_case two = oc;
    two.ndim = 2, two.shape[0] = two.shape[1] = 2, two.names[0] = "dp", two.names[1] = "tp";
    two.plan = (dt_hf_plan){.tp = "tp", .fsdp = "dp"};
    SPAWN_OK(4, own_rank, &two);
  }
  own_teardown(&oc);
}

Test(models, own_llama_odd_sizes_6_heads_on_4_ranks, .timeout = 120) { own_run(&REF_LLAMA, 4); }
Test(models, own_gpt2_odd_sizes_3_heads_on_4_ranks, .timeout = 120) { own_run(&REF_GPT2, 4); }

/* Llama 3 rope scaling (a frequency in each band) against the naive loops' own formula, with
 * max_position_embeddings 1e9: the rotary tables cover only the positions a forward uses. */
Test(models, own_llama3_rope_scaling_1e9_positions, .timeout = 120) { own_run(&REF_LLAMA3, 4); }

/* Saved on TP 2 in Hugging Face's layout, reloaded on 1 rank: the same logits as the naive
 * loops on the original weights (GPT-2's c_attn is joined back). */
static void save_reload(const ref_cfg *c) {
  own_case oc = {0};
  own_setup(&oc, c, 23);
  own_case tp = oc;
  tp.ndim = 1, tp.shape[0] = 2, tp.names[0] = "tp", tp.plan = (dt_hf_plan){.tp = "tp"};
  snprintf(tp.save_dir, sizeof tp.save_dir, "%.150s/saved", oc.dir);
  SPAWN_OK(2, own_rank, &tp);
  own_case back = oc;
  snprintf(back.dir, sizeof back.dir, "%s", tp.save_dir);
  cr_assert_eq(own_rank(NULL, &back), DT_OK, "reloaded: %s", dt_last_error());
  remove_dir(tp.save_dir);
  own_teardown(&oc);
}

Test(models, save_reload_llama, .timeout = 60) { save_reload(&REF_LLAMA); }
Test(models, save_reload_gpt2, .timeout = 60) { save_reload(&REF_GPT2); }

/* Bad checkpoints are refused with a message naming the file and the tensor. */
static void expect_load_error(const char *dir, dt_status want, const char *const *words, int n) {
  dt_hf_model *m = NULL;
  dt_status st = dt_hf_model_load(dir, NULL, NULL, &m);
  cr_assert_eq(st, want, "status %s: %s", dt_status_string(st), dt_last_error());
  cr_assert_null(m);
  for (int i = 0; i < n; i++)
    cr_assert(strstr(dt_last_error(), words[i]), "message lacks \"%s\": %s", words[i],
              dt_last_error());
}

static void write_text(const char *dir, const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
}

Test(models, refuses_bad_checkpoints) {
  own_case oc = {0};
  own_setup(&oc, &REF_LLAMA, 5);
  /* A tensor missing: rewrite the file without the last layer's down_proj. */
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", oc.dir);
  ref_weights w = oc.w;
  int drop = -1;
  for (int i = 0; i < w.n; i++)
    if (!strcmp(w.names[i], "model.layers.1.mlp.down_proj.weight")) drop = i;
  cr_assert_geq(drop, 0);
  w.names[drop][0] = 'X'; /* renamed: the checkpoint lacks the real name */
  cr_assert_eq(ref_write(&REF_LLAMA, &w, oc.dir), DT_OK);
  expect_load_error(
      oc.dir, DT_ERR_INVALID,
      (const char *[]){"model.safetensors", "model.layers.1.mlp.down_proj.weight", "lacks"}, 3);
  w.names[drop][0] = 'm';
  /* A shape that disagrees with config.json: intermediate_size says 18, the file holds 17. */
  ref_cfg wrong = REF_LLAMA;
  cr_assert_eq(ref_write(&wrong, &w, oc.dir), DT_OK);
  char cfg[1024];
  snprintf(cfg, sizeof cfg,
           "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 37, \"hidden_size\": 22, "
           "\"intermediate_size\": 18, \"num_hidden_layers\": 2, \"num_attention_heads\": 6, "
           "\"num_key_value_heads\": 3, \"head_dim\": 4, \"max_position_embeddings\": 40}");
  write_text(oc.dir, "config.json", cfg);
  expect_load_error(
      oc.dir, DT_ERR_INVALID,
      (const char *[]){"model.safetensors", "mlp.gate_proj.weight", "[17, 22]", "[18, 22]"}, 4);
  /* Unknown architectures, rope types and activations. */
  write_text(oc.dir, "config.json",
             "{\"architectures\": [\"BertForMaskedLM\"], \"model_type\": \"bert\"}");
  expect_load_error(oc.dir, DT_ERR_UNSUPPORTED, (const char *[]){"config.json", "BertForMaskedLM"},
                    2);
  write_text(oc.dir, "config.json",
             "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 37, \"hidden_size\": 22, "
             "\"intermediate_size\": 17, \"num_hidden_layers\": 2, \"num_attention_heads\": 6, "
             "\"head_dim\": 4, "
             "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}");
  expect_load_error(oc.dir, DT_ERR_UNSUPPORTED, (const char *[]){"config.json", "yarn"}, 2);
  write_text(oc.dir, "config.json",
             "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 37}");
  expect_load_error(oc.dir, DT_ERR_INVALID, (const char *[]){"config.json", "hidden_size"}, 2);
  write_text(oc.dir, "config.json", "not json");
  expect_load_error(oc.dir, DT_ERR_INVALID, (const char *[]){"config.json", "JSON"}, 2);
  remove(path);
  snprintf(path, sizeof path, "%s/config.json", oc.dir);
  remove(path);
  expect_load_error(oc.dir, DT_ERR_IO, (const char *[]){"config.json"}, 1);
  own_teardown(&oc);
  /* Arguments. */
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(NULL, NULL, NULL, &m), DT_ERR_INVALID);
  cr_assert_eq(dt_hf_model_load("/nonexistent", NULL, NULL, NULL), DT_ERR_INVALID);
  dt_hf_plan plan = {.tp = "tp"};
  cr_assert_eq(dt_hf_model_load(HF "/llama_tiny", NULL, &plan, &m), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "mesh is NULL"), "%s", dt_last_error());
}

Test(models, forward_and_generate_refuse_bad_arguments) {
  SKIP_WITHOUT_FIXTURES();
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(HF "/gpt2_tiny", NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  dt_tensor *ids = NULL, *out = NULL, *f = NULL;
  cr_assert_eq(dt_from_data((int64_t[]){1, 2, 300}, 2, (int64_t[]){1, 3}, DT_I64, &ids), DT_OK);
  cr_assert_eq(dt_hf_model_forward(m, ids, NULL, &out), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "input_ids[0][2] = 300"), "%s", dt_last_error());
  cr_assert_eq(dt_from_data((float[]){1, 2}, 2, (int64_t[]){1, 2}, DT_F32, &f), DT_OK);
  cr_assert_eq(dt_hf_model_forward(m, f, NULL, &out), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "int64"), "%s", dt_last_error());
  int64_t prompt[3] = {1, 2, 3}, gen[400], n = 0;
  cr_assert_eq(dt_hf_generate(m, prompt, 3, 300, NULL, gen, &n, NULL, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "max_positions"), "%s", dt_last_error());
  dt_hf_sampling bad = {.temperature = 1, .top_p = 1.5};
  cr_assert_eq(dt_hf_generate(m, prompt, 3, 2, &bad, gen, &n, NULL, NULL), DT_ERR_INVALID);
  cr_assert_eq(dt_hf_model_loss(m, ids, NULL), DT_ERR_INVALID);
  dt_tensor_release(ids), dt_tensor_release(f);
  dt_hf_model_destroy(m);
}

/* eos_token_id as a list (Llama 3): generation stops after any of them. */
static void replace_eos(const char *dir, const char *eos) {
  char path[512], text[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  char *at = strstr(text, "\"eos_token_id\": 2");
  cr_assert_not_null(at);
  char out[4200];
  snprintf(out, sizeof out, "%.*s\"eos_token_id\": %s%s", (int)(at - text), text, eos,
           at + strlen("\"eos_token_id\": 2"));
  write_text(dir, "config.json", out);
}

Test(models, eos_token_id_list_stops_at_any, .timeout = 60) {
  own_case oc = {0};
  own_setup(&oc, &REF_LLAMA, 31);
  dt_hf_model *m = NULL;
  int64_t prompt[4] = {5, 1, 4, 2}, full[16], n_full = 0, out[16], n_out = 0;
  cr_assert_eq(dt_hf_model_load(oc.dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_hf_generate(m, prompt, 4, 9, NULL, full, &n_full, NULL, NULL), DT_OK);
  dt_hf_model_destroy(m);
  /* The first generated token after the second that is new: generation must stop there. */
  int64_t j = -1;
  for (int64_t k = 5; k < n_full && j < 0; k++) {
    bool seen = false;
    for (int64_t i = 4; i < k; i++) seen |= full[i] == full[k];
    if (!seen) j = k;
  }
  cr_assert_geq(j, 0, "no new token among the generated ones");
  int64_t unused = 0;
  for (bool hit = true; hit; unused++) {
    hit = false;
    for (int64_t i = 4; i < n_full; i++) hit |= full[i] == unused;
    if (!hit) break;
  }
  char eos[64];
  snprintf(eos, sizeof eos, "[%lld, %lld]", (long long)unused, (long long)full[j]);
  replace_eos(oc.dir, eos);
  cr_assert_eq(dt_hf_model_load(oc.dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  const dt_hf_config *c = dt_hf_model_config(m);
  cr_assert(c->n_eos_token_ids == 2 && c->eos_token_ids[0] == unused &&
            c->eos_token_ids[1] == full[j] && c->eos_token_id == unused);
  dt_hf_sampling s = {.use_eos = true};
  cr_assert_eq(dt_hf_generate(m, prompt, 4, 9, &s, out, &n_out, NULL, NULL), DT_OK);
  cr_assert_eq(n_out, j + 1, "stopped after %lld ids, expected %lld (%s)", (long long)n_out,
               (long long)(j + 1), eos);
  for (int64_t i = 0; i < n_out; i++) cr_assert_eq(out[i], full[i], "id %lld", (long long)i);
  dt_hf_model_destroy(m);
  /* A list longer than DT_HF_MAX_EOS is refused by name. */
  cr_assert_eq(ref_write(oc.cfg, &oc.w, oc.dir), DT_OK);
  replace_eos(oc.dir, "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]");
  expect_load_error(oc.dir, DT_ERR_INVALID, (const char *const[]){"config.json", "eos_token_id"},
                    2);
  own_teardown(&oc);
}
