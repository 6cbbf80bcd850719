/*
 * The 2-rank tensor-parallel twin of a Hugging Face model (issue 27): in one process each rank
 * loads the model on TP 2 and on 1 rank (no mesh) and checks, on every rank,
 *  - the TP 2 logits of a whole forward equal the 1-rank logits and transformers' (the
 *    fixture's io.safetensors), within 1e-4 of the largest logit like tests/test_models.c;
 *  - a prefill and three decode steps through the KV cache (sharded by heads under TP 2)
 *    give the 1-rank model's logits at every step;
 *  - greedy generation equals the 1-rank model's and transformers' ids, token for token;
 *  - sampled generation (temperature, top-k, top-p, one seed) gives the 1-rank model's ids.
 * Models: the fixtures' Llama (4 query heads over 2 kv heads: one kv head per rank) and GPT-2
 * (sharded checkpoint, tied head), and a Llama the test writes at odd sizes (6 query heads over
 * 3 kv heads: uneven on 2 ranks, vocabulary 37: uneven vocabulary shards) whose 1-rank logits
 * are checked against the naive loops of models_reference.h.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"
#include "models_reference.h"
#include "fixture_main.h"

#define HF DT_FIXTURES_DIR "/hf"
#define TOL 1e-4

typedef struct twin_case {
  char dir[256];
  const char *fixture;  /* the fixture's folder name, NULL for a model the test wrote */
  const ref_cfg *cfg;   /* the written model's config (naive-loop reference), else NULL */
  const ref_weights *w; /* its weights */
} twin_case;

/* The whole logits of a forward (gathered when distributed) as doubles, *n of them. */
static dt_status logits_of(dt_hf_model *m, dt_tensor *ids, dt_hf_kv_cache *cache, double **out,
                           int64_t *n) {
  dt_tensor *logits = NULL, *full = NULL;
  RANK_OK(dt_hf_model_forward(m, ids, cache, &logits));
  if (dt_tensor_is_distributed(logits)) {
    RANK_OK(dt_dist_full_tensor(logits, &full));
  } else {
    full = dt_tensor_retain(logits);
  }
  *n = dt_tensor_numel(full);
  *out = malloc(sizeof(double) * (size_t)*n);
  RANK_CHECK(*out != NULL, "out of memory");
  RANK_OK(dt_tensor_to_doubles(full, *out, *n));
  dt_tensor_release(logits), dt_tensor_release(full);
  return DT_OK;
}

/* max |a - b| / max |b|. */
static double rel_diff(const double *a, const double *b, int64_t n) {
  double md = 0, mb = 0;
  for (int64_t i = 0; i < n; i++) md = fmax(md, fabs(a[i] - b[i])), mb = fmax(mb, fabs(b[i]));
  return md / (mb > 0 ? mb : 1);
}

static dt_status ids_tensor(const int64_t *ids, int64_t B, int64_t T, dt_tensor **out) {
  return dt_from_data(ids, 2, (int64_t[]){B, T}, DT_I64, out);
}

/* The input ids and their reference logits: the fixture's (transformers) or the naive loops'. */
static dt_status reference(const twin_case *c, int64_t V, dt_tensor **ids, double **want,
                           int64_t *n) {
  if (c->fixture) {
    char path[512];
    snprintf(path, sizeof path, HF "/%s/io.safetensors", c->fixture);
    dt_safetensors *f = NULL;
    dt_tensor *l = NULL;
    RANK_OK(dt_safetensors_open(path, &f));
    RANK_OK(dt_safetensors_load(f, "input_ids", DT_SAFETENSORS_COPY, ids));
    RANK_OK(dt_safetensors_load(f, "logits", DT_SAFETENSORS_COPY, &l));
    dt_safetensors_destroy(f);
    *n = dt_tensor_numel(l);
    *want = malloc(sizeof(double) * (size_t)*n);
    RANK_CHECK(*want != NULL, "out of memory");
    RANK_OK(dt_tensor_to_doubles(l, *want, *n));
    dt_tensor_release(l);
    return DT_OK;
  }
  enum { B = 2, T = 9 };
  int64_t id[B * T];
  for (int i = 0; i < B * T; i++) id[i] = (i * 11 + 2) % V;
  RANK_OK(ids_tensor(id, B, T, ids));
  *n = B * T * V;
  *want = malloc(sizeof(double) * (size_t)*n);
  RANK_CHECK(*want != NULL, "out of memory");
  for (int b = 0; b < B; b++) ref_forward(c->cfg, c->w, id + b * T, T, *want + b * T * V);
  return DT_OK;
}

/* Whole forward: TP 2 against 1 rank and against the reference. */
static dt_status check_forward(const twin_case *c, dt_hf_model *tp, dt_hf_model *one) {
  int64_t V = dt_hf_model_config(one)->vocab_size, n = 0, n1 = 0, n2 = 0;
  dt_tensor *ids = NULL;
  double *want = NULL, *l1 = NULL, *l2 = NULL;
  RANK_OK(reference(c, V, &ids, &want, &n));
  RANK_OK(logits_of(one, ids, NULL, &l1, &n1));
  RANK_OK(logits_of(tp, ids, NULL, &l2, &n2));
  RANK_CHECK(n1 == n && n2 == n, "logits of %lld, %lld and %lld values", (long long)n1,
             (long long)n2, (long long)n);
  double d21 = rel_diff(l2, l1, n), d1 = rel_diff(l1, want, n), d2 = rel_diff(l2, want, n);
  RANK_CHECK(d21 <= TOL, "%s: TP 2 logits differ from 1 rank's by %.3g of the largest", c->dir,
             d21);
  RANK_CHECK(d1 <= TOL && d2 <= TOL,
             "%s: logits differ from the reference by %.3g (1 rank), "
             "%.3g (TP 2)",
             c->dir, d1, d2);
  free(want), free(l1), free(l2);
  dt_tensor_release(ids);
  return DT_OK;
}

/* A prefill of 5 ids, then 3 one-token decode steps through each model's KV cache: the TP 2
 * logits of every step equal the 1-rank ones. */
static dt_status check_cache_steps(dt_hf_model *tp, dt_hf_model *one) {
  int64_t V = dt_hf_model_config(one)->vocab_size;
  dt_hf_kv_cache *c1 = NULL, *c2 = NULL;
  RANK_OK(dt_hf_kv_cache_create(one, &c1));
  RANK_OK(dt_hf_kv_cache_create(tp, &c2));
  int64_t prompt[5] = {1 % V, 7 % V, 30 % V, 4 % V, 19 % V}, step_ids[3] = {3 % V, 25 % V, 8 % V};
  for (int s = 0; s < 4; s++) {
    dt_tensor *ids = NULL;
    RANK_OK(s == 0 ? ids_tensor(prompt, 1, 5, &ids) : ids_tensor(step_ids + s - 1, 1, 1, &ids));
    double *l1 = NULL, *l2 = NULL;
    int64_t n1 = 0, n2 = 0;
    RANK_OK(logits_of(one, ids, c1, &l1, &n1));
    RANK_OK(logits_of(tp, ids, c2, &l2, &n2));
    RANK_CHECK(n1 == n2, "step %d: %lld and %lld logits", s, (long long)n1, (long long)n2);
    double d = rel_diff(l2, l1, n1);
    RANK_CHECK(d <= TOL, "step %d (cache length %lld): TP 2 logits differ by %.3g", s,
               (long long)dt_hf_kv_cache_length(c2), d);
    free(l1), free(l2);
    dt_tensor_release(ids);
  }
  RANK_CHECK(dt_hf_kv_cache_length(c1) == 8 && dt_hf_kv_cache_length(c2) == 8,
             "cache lengths %lld and %lld", (long long)dt_hf_kv_cache_length(c1),
             (long long)dt_hf_kv_cache_length(c2));
  dt_hf_kv_cache_destroy(c1), dt_hf_kv_cache_destroy(c2);
  return DT_OK;
}

/* Greedy (against 1 rank and the fixture's greedy_ids) and sampled generation. */
static dt_status check_generation(const twin_case *c, dt_hf_model *tp, dt_hf_model *one) {
  int64_t V = dt_hf_model_config(one)->vocab_size;
  int64_t prompt[8] = {5 % V, 1 % V, 4 % V, 2 % V, 9 % V}, np = 5, want[64], nw = 0;
  if (c->fixture) {
    char path[512];
    snprintf(path, sizeof path, HF "/%s/io.safetensors", c->fixture);
    dt_safetensors *f = NULL;
    dt_tensor *p = NULL, *g = NULL;
    double d[64];
    RANK_OK(dt_safetensors_open(path, &f));
    RANK_OK(dt_safetensors_load(f, "prompt_ids", DT_SAFETENSORS_COPY, &p));
    RANK_OK(dt_safetensors_load(f, "greedy_ids", DT_SAFETENSORS_COPY, &g));
    dt_safetensors_destroy(f);
    np = dt_tensor_numel(p), nw = dt_tensor_numel(g);
    RANK_CHECK(np <= 8 && nw <= 64, "fixture prompt %lld, greedy %lld", (long long)np,
               (long long)nw);
    RANK_OK(dt_tensor_to_doubles(p, d, np));
    for (int64_t i = 0; i < np; i++) prompt[i] = (int64_t)d[i];
    RANK_OK(dt_tensor_to_doubles(g, d, nw));
    for (int64_t i = 0; i < nw; i++) want[i] = (int64_t)d[i];
    dt_tensor_release(p), dt_tensor_release(g);
  }
  int64_t max_new = nw ? nw - np : 12, o1[64], o2[64], n1 = 0, n2 = 0;
  RANK_OK(dt_hf_generate(one, prompt, np, max_new, NULL, o1, &n1, NULL, NULL));
  RANK_OK(dt_hf_generate(tp, prompt, np, max_new, NULL, o2, &n2, NULL, NULL));
  RANK_CHECK(n1 == np + max_new && n2 == n1, "greedy: %lld and %lld ids", (long long)n1,
             (long long)n2);
  for (int64_t i = 0; i < n1; i++) {
    RANK_CHECK(o2[i] == o1[i], "greedy token %lld: TP 2 %lld, 1 rank %lld", (long long)i,
               (long long)o2[i], (long long)o1[i]);
    RANK_CHECK(!nw || o1[i] == want[i], "greedy token %lld: %lld, transformers %lld", (long long)i,
               (long long)o1[i], (long long)want[i]);
  }
  dt_hf_sampling s = {.temperature = 0.9, .top_k = 30, .top_p = 0.95, .seed = 7};
  RANK_OK(dt_hf_generate(one, prompt, np, 16, &s, o1, &n1, NULL, NULL));
  RANK_OK(dt_hf_generate(tp, prompt, np, 16, &s, o2, &n2, NULL, NULL));
  RANK_CHECK(n1 == np + 16 && n2 == n1, "sampled: %lld and %lld ids", (long long)n1, (long long)n2);
  bool all_greedy = true;
  for (int64_t i = 0; i < n1; i++) {
    RANK_CHECK(o2[i] == o1[i], "sampled token %lld: TP 2 %lld, 1 rank %lld", (long long)i,
               (long long)o2[i], (long long)o1[i]);
    if (nw && i < nw && o1[i] != want[i]) all_greedy = false;
  }
  /* The draws did something: a sampled run that equals the greedy one checks nothing. */
  RANK_CHECK(!nw || !all_greedy, "sampled generation equals the greedy one");
  return DT_OK;
}

static dt_status twin_rank(dt_comm *world, void *arg) {
  const twin_case *c = arg;
  dt_mesh *mesh = NULL;
  dt_hf_model *tp = NULL, *one = NULL;
  dt_hf_plan plan = {.tp = "tp"};
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"tp"}, &mesh));
  RANK_OK(dt_hf_model_load(c->dir, mesh, &plan, &tp));
  RANK_OK(dt_hf_model_load(c->dir, NULL, NULL, &one));
  RANK_CHECK(dt_tensor_is_distributed(dt_hf_model_param(tp, 1, NULL)),
             "the TP 2 model's parameters are not distributed");
  RANK_OK(check_forward(c, tp, one));
  RANK_OK(check_cache_steps(tp, one));
  RANK_OK(check_generation(c, tp, one));
  dt_hf_model_destroy(tp), dt_hf_model_destroy(one);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void fixture_twin(const char *name) {
  twin_case c = {.fixture = name};
  snprintf(c.dir, sizeof c.dir, HF "/%s", name);
  char path[512];
  snprintf(path, sizeof path, "%s/config.json", c.dir);
  FILE *f = fopen(path, "r");
  if (!f) cr_skip_test("the hf fixtures are absent (%s)", HF);
  fclose(f);
  SPAWN_OK(2, twin_rank, &c);
}

Test(models_tp2, llama_fixture_twin, .timeout = 120) { fixture_twin("llama_tiny"); }
Test(models_tp2, gpt2_fixture_twin, .timeout = 120) { fixture_twin("gpt2_tiny"); }

Test(models_tp2, own_llama_6_over_3_heads_twin, .timeout = 120) {
  ref_weights w;
  ref_make(&REF_LLAMA, 5, &w);
  twin_case c = {.cfg = &REF_LLAMA, .w = &w};
  snprintf(c.dir, sizeof c.dir, "/tmp/dt_models_tp2_XXXXXX");
  cr_assert_not_null(mkdtemp(c.dir));
  cr_assert_eq(ref_write(&REF_LLAMA, &w, c.dir), DT_OK, "%s", dt_last_error());
  dt_status st = dt_comm_spawn(2, twin_rank, &c);
  char path[512];
  snprintf(path, sizeof path, "%s/config.json", c.dir);
  remove(path);
  snprintf(path, sizeof path, "%s/model.safetensors", c.dir);
  remove(path);
  remove(c.dir);
  ref_free(&w);
  cr_assert_eq(st, DT_OK, "%s", dt_last_error());
}
