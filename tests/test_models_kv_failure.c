/*
 * A forward that fails part-way must leave the KV cache as it was: for every op k of a forward
 * over a cached prefix, a dispatch mode makes op k fail (as an out-of-memory or a collective
 * timeout would), and then the same forward retried, and a decode after it, give bit for bit
 * the logits of a cache that never saw a failure. On the Llama and GPT-2 fixtures
 * (../shared/fixtures/hf), on 1 rank and on TP 2 (the failure on every rank at the same op).
 */
#include <criterion/criterion.h>

#include "fixture_main.h" /* a run whose cases skipped for want of fixtures says so */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"

#define HF DT_FIXTURES_DIR "/hf"

static bool hf_present(void) {
  FILE *f = fopen(HF "/expected.json", "r");
  if (f) fclose(f);
  return f != NULL;
}

/* Fails the op numbered `fail_at` (1-based) of those it sees; counts them all. Per thread. */
typedef struct failer {
  long seen, fail_at;
} failer;

static dt_status fail_mode(dt_invocation *inv, void *user) {
  failer *f = user;
  if (++f->seen == f->fail_at) return DT_ERR_COMM; /* as a collective timeout would */
  return dt_invocation_run(inv);
}

static dt_status ids_of(const int64_t *v, int64_t n, dt_tensor **out) {
  return dt_from_data(v, 2, (int64_t[]){1, n}, DT_I64, out);
}

/* Logits of input (1 x n ids) after `cache`, gathered to doubles; the cache is extended. */
static dt_status logits_of(dt_hf_model *m, dt_hf_kv_cache *cache, const int64_t *v, int64_t n,
                           double **out, int64_t *count) {
  dt_tensor *ids = NULL, *lg = NULL, *full = NULL;
  dt_status st = ids_of(v, n, &ids);
  if (!st) st = dt_hf_model_forward(m, ids, cache, &lg);
  if (!st && dt_tensor_is_distributed(lg)) {
    st = dt_dist_full_tensor(lg, &full);
  } else if (!st) {
    full = dt_tensor_retain(lg);
  }
  if (!st) {
    *count = dt_tensor_numel(full);
    *out = malloc(sizeof(double) * (size_t)*count);
    st = *out ? dt_tensor_to_doubles(full, *out, *count) : DT_ERR_NOMEM;
  }
  dt_tensor_release(ids), dt_tensor_release(lg), dt_tensor_release(full);
  return st;
}

static const int64_t PREFIX[] = {1, 5, 9, 3, 7}, CHUNK[] = {2, 8, 4}, NEXT[] = {6};

/* The logits of CHUNK and then NEXT after PREFIX, through one cache that never failed. */
static dt_status reference(dt_hf_model *m, double **chunk, double **next, int64_t *nc,
                           int64_t *nn) {
  dt_hf_kv_cache *cache = NULL;
  double *pre = NULL;
  int64_t np = 0;
  dt_status st = dt_hf_kv_cache_create(m, &cache);
  if (!st) st = logits_of(m, cache, PREFIX, 5, &pre, &np);
  if (!st) st = logits_of(m, cache, CHUNK, 3, chunk, nc);
  if (!st) st = logits_of(m, cache, NEXT, 1, next, nn);
  free(pre);
  dt_hf_kv_cache_destroy(cache);
  return st;
}

/* For every op k of the CHUNK forward: fail op k, then retry. Returns the number of failure
 * points tried in *points. */
static dt_status sweep(dt_hf_model *m, const char *name, long *points) {
  double *want_chunk = NULL, *want_next = NULL;
  int64_t nc = 0, nn = 0;
  RANK_OK(reference(m, &want_chunk, &want_next, &nc, &nn));
  /* How many ops one CHUNK forward dispatches on this rank. */
  failer count = {0, -1};
  {
    dt_hf_kv_cache *cache = NULL;
    double *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    RANK_OK(dt_hf_kv_cache_create(m, &cache));
    RANK_OK(logits_of(m, cache, PREFIX, 5, &a, &na));
    RANK_OK(dt_mode_push(fail_mode, &count));
    dt_status st = logits_of(m, cache, CHUNK, 3, &b, &nb);
    RANK_OK(dt_mode_pop());
    RANK_OK(st);
    free(a), free(b);
    dt_hf_kv_cache_destroy(cache);
  }
  RANK_CHECK(count.seen > 20, "%s: a forward dispatched only %ld ops", name, count.seen);
  for (long k = 1; k <= count.seen; k++) {
    dt_hf_kv_cache *cache = NULL;
    double *pre = NULL, *chunk = NULL, *next = NULL;
    int64_t np = 0, n1 = 0, n2 = 0;
    RANK_OK(dt_hf_kv_cache_create(m, &cache));
    RANK_OK(logits_of(m, cache, PREFIX, 5, &pre, &np));
    failer f = {0, k};
    RANK_OK(dt_mode_push(fail_mode, &f));
    double *lost = NULL;
    int64_t nl = 0;
    dt_status st = logits_of(m, cache, CHUNK, 3, &lost, &nl);
    RANK_OK(dt_mode_pop());
    RANK_CHECK(st != DT_OK, "%s: the forward with op %ld failing succeeded", name, k);
    dt_clear_error();
    RANK_CHECK(dt_hf_kv_cache_length(cache) == 5, "%s op %ld: cache length %lld after a failure",
               name, k, (long long)dt_hf_kv_cache_length(cache));
    RANK_OK(logits_of(m, cache, CHUNK, 3, &chunk, &n1));
    RANK_OK(logits_of(m, cache, NEXT, 1, &next, &n2));
    RANK_CHECK(n1 == nc && n2 == nn, "%s op %ld: logit counts differ", name, k);
    for (int64_t i = 0; i < nc; i++)
      RANK_CHECK(chunk[i] == want_chunk[i], "%s op %ld: retried logit %lld = %.9g, want %.9g", name,
                 k, (long long)i, chunk[i], want_chunk[i]);
    for (int64_t i = 0; i < nn; i++)
      RANK_CHECK(next[i] == want_next[i], "%s op %ld: decode logit %lld = %.9g, want %.9g", name, k,
                 (long long)i, next[i], want_next[i]);
    free(pre), free(lost), free(chunk), free(next);
    dt_hf_kv_cache_destroy(cache);
  }
  *points = count.seen;
  free(want_chunk), free(want_next);
  return DT_OK;
}

static void one_rank(const char *model) {
  if (!hf_present()) cr_skip_test("the hf fixtures are absent (%s)", HF);
  char dir[256];
  snprintf(dir, sizeof dir, HF "/%s", model);
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  long points = 0;
  cr_assert_eq(sweep(m, model, &points), DT_OK, "%s", dt_last_error());
  cr_log_info("%s: %ld failure points, each retried bit for bit", model, points);
  dt_hf_model_destroy(m);
}

Test(models_kv_failure, llama_one_rank, .timeout = 240) { one_rank("llama_tiny"); }
Test(models_kv_failure, gpt2_one_rank, .timeout = 240) { one_rank("gpt2_tiny"); }

static dt_status tp_rank(dt_comm *world, void *arg) {
  const char *model = arg;
  char dir[256];
  snprintf(dir, sizeof dir, HF "/%s", model);
  dt_mesh *mesh = NULL;
  dt_hf_model *m = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"tp"}, &mesh));
  RANK_OK(dt_hf_model_load(dir, mesh, &(dt_hf_plan){.tp = "tp"}, &m));
  long points = 0;
  dt_status st = sweep(m, model, &points);
  dt_hf_model_destroy(m);
  dt_mesh_destroy(mesh);
  return st;
}

Test(models_kv_failure, llama_tp2, .timeout = 240) {
  if (!hf_present()) cr_skip_test("the hf fixtures are absent (%s)", HF);
  SPAWN_OK(2, tp_rank, "llama_tiny");
}
Test(models_kv_failure, gpt2_tp2, .timeout = 240) {
  if (!hf_present()) cr_skip_test("the hf fixtures are absent (%s)", HF);
  SPAWN_OK(2, tp_rank, "gpt2_tiny");
}
