/*
 * Generation with a KV cache (greedy and sampled: temperature, top-k, top-p, draws from
 * Philox so that every rank picks the same token), and saving a model back in Hugging Face's
 * layout.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/core_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/checkpoint.h"
#include "dtensor/ops.h"
#include "models/models_impl.h"
#include "profile/output_file.h" /* config.json written whole or not at all */
#include "tensor/tensor_impl.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The last position's logits of a [1, T, V] result as doubles (gathered on every rank). */
static dt_status last_logits(dt_tensor *logits, int64_t V, double *row) {
  const int64_t *shape =
      dt_tensor_is_distributed(logits) ? dt_dist_global_shape(logits) : dt_tensor_shape(logits);
  dt_tensor *last = NULL, *full = NULL;
  dt_status st = dt_narrow(logits, 1, shape[1] - 1, 1, &last);
  if (!st && dt_tensor_is_distributed(last)) st = dt_dist_full_tensor(last, &full);
  if (!st && !full) full = dt_tensor_retain(last);
  dt_tensor *c = NULL;
  if (!st) st = dt_contiguous(full, &c);
  if (!st) st = dt_tensor_to_doubles(c, row, V);
  dt_tensor_release(last);
  dt_tensor_release(full);
  dt_tensor_release(c);
  return st;
}

/* A uniform draw in [0, 1) from Philox, a function of (seed, step) only. */
static dt_status draw(uint64_t seed, int64_t step, double *u) {
  dt_tensor *r = NULL;
  dt_status st = dt_rand(1, (int64_t[]){1}, DT_F64, dt__hash_mix(seed, (uint64_t)step), &r);
  if (!st) st = dt_tensor_to_doubles(r, u, 1);
  dt_tensor_release(r);
  return st;
}

/* The `keep` largest of the V logits, sorted (ties: the lower id first), by the topk op: their
 * logits into vals and ids into ids. Dividing by a positive temperature keeps the order, so the
 * logits are not scaled here (scaled by a tiny temperature they overflowed to +-inf). */
static dt_status top_logits(const double *row, int64_t V, int64_t keep, double *vals,
                            int64_t *ids) {
  dt_tensor *t = NULL, *tv = NULL, *ti = NULL;
  dt_status st = dt_from_data(row, 1, &V, DT_F64, &t);
  if (!st) st = dt_topk(t, keep, 0, true, &tv, &ti);
  if (!st) st = dt_tensor_to_doubles(tv, vals, keep);
  if (!st) memcpy(ids, dt_tensor_data(ti), sizeof(int64_t) * (size_t)keep);
  dt_tensor_release(t), dt_tensor_release(tv), dt_tensor_release(ti);
  return st;
}

/* The unnormalized probability of the i-th kept logit: exp((vals[i] - vals[0]) / temperature),
 * the difference taken before the division so that a tiny temperature gives 1 for the largest
 * logits and 0 for the rest (scaling first gave inf - inf = NaN and drew the least likely). */
static double weight(const double *vals, int64_t i, double temperature) {
  return exp((vals[i] - vals[0]) / temperature);
}

/* The next token from one row of logits (transformers' order: temperature, top-k, top-p). */
static dt_status pick(const dt_hf_sampling *s, double *row, int64_t V, int64_t step, double *vals,
                      int64_t *ids, int64_t *token) {
  if (!s || s->temperature <= 0) {
    int64_t best = 0;
    for (int64_t i = 0; i < V; i++) {
      if (isnan(row[i])) /* argmax would pick an arbitrary id: refuse, as sampling does */
        return dt__error(DT_ERR_INVALID,
                         "dt_hf_generate: the logits of step %lld hold nan (token %lld): no "
                         "greedy id to pick",
                         (long long)step, (long long)i);
      if (row[i] > row[best]) best = i;
    }
    *token = best;
    return DT_OK;
  }
  int64_t keep = s->top_k > 0 && s->top_k < V ? s->top_k : V;
  dt_status st = top_logits(row, V, keep, vals, ids);
  if (st) return st;
  if (!isfinite(vals[0]))
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_generate: the logits of step %lld hold %g (token %lld): no "
                     "distribution to sample from",
                     (long long)step, vals[0], (long long)ids[0]);
  double total = 0;
  for (int64_t i = 0; i < keep; i++) total += weight(vals, i, s->temperature);
  if (s->top_p > 0 && s->top_p < 1) {
    double cum = 0;
    int64_t n = 0;
    while (n < keep) {
      cum += weight(vals, n, s->temperature) / total;
      n++;
      if (cum >= s->top_p) break;
    }
    keep = n;
    total = 0;
    for (int64_t i = 0; i < keep; i++) total += weight(vals, i, s->temperature);
  }
  double u = 0;
  st = draw(s->seed, step, &u);
  if (st) return st;
  double target = u * total, cum = 0;
  *token = ids[keep - 1];
  for (int64_t i = 0; i < keep; i++) {
    cum += weight(vals, i, s->temperature);
    if (cum > target) {
      *token = ids[i];
      break;
    }
  }
  return DT_OK;
}

static dt_status check_generate(const dt_hf_model *m, const int64_t *prompt, int64_t n_prompt,
                                int64_t max_new, const dt_hf_sampling *s, const int64_t *out,
                                const int64_t *n_out) {
  const char *fn = "dt_hf_generate";
  if (!m || !prompt || !out || !n_out)
    return dt__error(DT_ERR_INVALID, "%s: model, prompt, out and n_out must not be NULL", fn);
  if (n_prompt < 1 || max_new < 0)
    return dt__error(DT_ERR_INVALID, "%s: n_prompt %lld must be >= 1 and max_new %lld >= 0", fn,
                     (long long)n_prompt, (long long)max_new);
  if (n_prompt > m->cfg.max_positions || max_new > m->cfg.max_positions - n_prompt)
    return dt__error(DT_ERR_INVALID, "%s: %lld prompt + %lld new tokens exceed max_positions %lld",
                     fn, (long long)n_prompt, (long long)max_new, (long long)m->cfg.max_positions);
  for (int64_t i = 0; i < n_prompt; i++)
    if (prompt[i] < 0 || prompt[i] >= m->cfg.vocab_size)
      return dt__error(DT_ERR_INVALID, "%s: prompt[%lld] = %lld is outside [0, %lld)", fn,
                       (long long)i, (long long)prompt[i], (long long)m->cfg.vocab_size);
  if (s && (!(s->temperature >= 0) || !isfinite(s->temperature) || s->top_k < 0 ||
            !(s->top_p >= 0 && s->top_p <= 1)))
    return dt__error(DT_ERR_INVALID,
                     "%s: sampling needs temperature >= 0, top_k >= 0, top_p in [0, 1] (got %g, "
                     "%lld, %g)",
                     fn, s->temperature, (long long)s->top_k, s->top_p);
  /* -1 means no stop token; any other value must be a token id, or generation would run to
   * max_new where the caller asked it to stop. */
  if (s && (s->stop_token < -1 || s->stop_token >= m->cfg.vocab_size))
    return dt__error(DT_ERR_INVALID,
                     "%s: sampling.stop_token is %lld, expected a token id in [0, %lld) (the "
                     "vocab_size), or -1 for none",
                     fn, (long long)s->stop_token, (long long)m->cfg.vocab_size);
  if (s && s->use_stop_token && s->stop_token < 0)
    return dt__error(DT_ERR_INVALID,
                     "%s: sampling.use_stop_token is set but sampling.stop_token is %lld (no "
                     "token id)",
                     fn, (long long)s->stop_token);
  return DT_OK;
}

dt_status dt_hf_generate(dt_hf_model *m, const int64_t *prompt, int64_t n_prompt, int64_t max_new,
                         const dt_hf_sampling *s, int64_t *out, int64_t *n_out, double *prefill_s,
                         double *decode_s) {
  dt_status st = check_generate(m, prompt, n_prompt, max_new, s, out, n_out);
  if (st) return st;
  int64_t V = m->cfg.vocab_size;
  /* The ids that end generation: every eos id of the config and the caller's stop token. */
  int64_t stops[DT_HF_MAX_EOS + 1];
  int n_stops = 0;
  if (s && s->use_eos) {
    n_stops = m->cfg.n_eos_token_ids;
    memcpy(stops, m->cfg.eos_token_ids, sizeof(int64_t) * (size_t)n_stops);
  }
  if (s && (s->stop_token > 0 || (s->use_stop_token && s->stop_token == 0)))
    stops[n_stops++] = s->stop_token;
  double *row = dt__alloc(sizeof(double) * (size_t)V);
  double *vals = dt__alloc(sizeof(double) * (size_t)V);
  int64_t *top_ids = dt__alloc(sizeof(int64_t) * (size_t)V);
  dt_hf_kv_cache *cache = NULL;
  if (!row || !vals || !top_ids) st = dt__error(DT_ERR_NOMEM, "dt_hf_generate: out of memory");
  if (!st) st = dt_hf_kv_cache_create(m, &cache);
  memcpy(out, prompt, sizeof(int64_t) * (size_t)n_prompt);
  int64_t n = n_prompt;
  double t0 = now_s(), t1 = t0;
  bool prev = dt_grad_mode_set(false);
  for (int64_t step = 0; step < max_new && !st; step++) {
    const int64_t *feed = step == 0 ? prompt : out + n - 1;
    int64_t len = step == 0 ? n_prompt : 1;
    dt_tensor *ids = NULL, *logits = NULL;
    st = dt_from_data(feed, 2, (int64_t[]){1, len}, DT_I64, &ids);
    if (!st) st = dt_hf_model_forward(m, ids, cache, &logits);
    if (!st) st = last_logits(logits, V, row);
    dt_tensor_release(ids);
    dt_tensor_release(logits);
    int64_t token = 0;
    if (!st) st = pick(s, row, V, step, vals, top_ids, &token);
    if (st) break;
    out[n++] = token;
    if (step == 0) t1 = now_s();
    bool end = false;
    for (int k = 0; k < n_stops; k++) end |= token == stops[k];
    if (end) break;
  }
  dt_grad_mode_set(prev);
  double t2 = now_s();
  if (prefill_s) *prefill_s = (max_new > 0 ? t1 : t2) - t0;
  if (decode_s) *decode_s = max_new > 0 ? t2 - t1 : 0;
  *n_out = n;
  dt_hf_kv_cache_destroy(cache);
  dt__free(row);
  dt__free(vals);
  dt__free(top_ids);
  return st;
}

/* The tree's parameter p gathered whole (collective) in the checkpoint's layout: transposed
 * back where the file holds [in, out]. */
static dt_status gathered_one(const dt_hf_model *m, const hf_param *p, dt_tensor **out) {
  dt_tensor *t = dt_module_get_tensor(m->root, p->fqn), *whole = NULL, *tr = NULL;
  dt_status st =
      dt_tensor_is_distributed(t) ? dt_dist_full_tensor(t, &whole) : dt_detach(t, &whole);
  if (!st && p->transposed) st = dt_transpose(whole, 0, 1, &tr);
  if (!st && p->transposed) st = dt_contiguous(tr, out);
  if (!st && !p->transposed) *out = dt_tensor_retain(whole);
  dt_tensor_release(whole);
  dt_tensor_release(tr);
  return st;
}

/* Checkpoint tensor of parameter i gathered whole, GPT-2's c_attn parts joined (i is part 0). */
static dt_status gathered(const dt_hf_model *m, int i, dt_tensor **out) {
  const hf_param *p = &m->params[i];
  if (p->part < 0) return gathered_one(m, p, out);
  dt_tensor *parts[3] = {NULL, NULL, NULL};
  dt_status st = DT_OK;
  for (int j = 0; j < m->n_params && !st; j++) {
    const hf_param *q = &m->params[j];
    if (q->part >= 0 && !strcmp(q->file_name, p->file_name) && !parts[q->part])
      st = gathered_one(m, q, &parts[q->part]);
  }
  if (!st && (!parts[1] || !parts[2]))
    st = dt__error(DT_ERR_INTERNAL, "dt_hf_model_save: %s lacks a part", p->file_name);
  if (!st) st = dt_cat(3, parts, dt_tensor_ndim(parts[0]) - 1, out);
  for (int k = 0; k < 3; k++) dt_tensor_release(parts[k]);
  return st;
}

/* An error of dt_safetensors_save, named for the function the user called. */
static dt_status as_save_error(dt_status st) {
  static const char inner[] = "dt_safetensors_save: ";
  const char *message = dt_last_error();
  if (strncmp(message, inner, sizeof inner - 1) != 0) return st;
  char rest[1024];
  snprintf(rest, sizeof rest, "%s", message + sizeof inner - 1);
  return dt__error(st, "dt_hf_model_save: %s", rest);
}

/* The writer's part of dt_hf_model_save: the weights, then config.json, each written to a
 * temporary and renamed in place, so a failure leaves the old files whole. */
static dt_status write_files(const dt_hf_model *m, const char *dir, int n, const char **names,
                             dt_tensor **tensors) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return dt__error(DT_ERR_IO, "dt_hf_model_save: cannot create %s: %s", dir, strerror(errno));
  char path[4096];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  const char *keys[1] = {"format"}, *values[1] = {"pt"};
  dt_status st = dt_safetensors_save(path, n, names, tensors, 1, keys, values);
  if (st) return as_save_error(st);
  snprintf(path, sizeof path, "%s/config.json", dir);
  dt__output_file output;
  FILE *f = dt__output_open(&output, path);
  if (!f) {
    int err = errno;
    return dt__error(DT_ERR_IO, "dt_hf_model_save: cannot write %s: %s", path,
                     dt__output_strerror(&output, err));
  }
  size_t len = strlen(m->config_text);
  bool failed = fwrite(m->config_text, 1, len, f) != len;
  int err = dt__output_close(&output, f, failed);
  if (err) return dt__output_close_error(&output, err, "dt_hf_model_save");
  return DT_OK;
}

/* Every rank of the mesh returns the writer's verdict (or its own earlier error): the writer
 * broadcasts its status over the mesh's world. */
static dt_status agree(const dt_hf_model *m, const char *dir, dt_status mine) {
  int zeros[DT_MESH_MAX_DIMS] = {0};
  int root = dt_mesh_rank_at(m->mesh, zeros);
  dt_comm *world = dt_mesh_world(m->mesh);
  bool writer = dt_comm_rank(world) == root;
  char message[512];
  snprintf(message, sizeof message, "%s", mine ? dt_last_error() : "");
  int64_t verdict = mine;
  dt_tensor *t = NULL;
  dt_status st = dt_from_data(&verdict, 1, (int64_t[]){1}, DT_I64, &t);
  if (!st) st = dt_comm_broadcast(world, t, root);
  if (!st) verdict = *(const int64_t *)dt_tensor_data(t);
  dt_tensor_release(t);
  if (st) return st;
  if (mine) return dt__error(mine, "%s", message);
  if (verdict != DT_OK && !writer) {
    return dt__error((dt_status)verdict,
                     "dt_hf_model_save: the writing rank (%d) failed to save %s: %s", root, dir,
                     dt_status_string((dt_status)verdict));
  }
  return (dt_status)verdict;
}

dt_status dt_hf_model_save(const dt_hf_model *m, const char *dir) {
  if (!m || !dir)
    return dt__error(DT_ERR_INVALID, "dt_hf_model_save: %s is NULL", m ? "dir" : "model");
  if (strlen(dir) > 3000) return dt__error(DT_ERR_INVALID, "dt_hf_model_save: dir is too long");
  bool writer = true;
  if (m->mesh)
    for (int d = 0; d < dt_mesh_ndim(m->mesh); d++) writer &= dt_mesh_coordinate(m->mesh, d) == 0;
  int n = 0;
  const char **names = dt__calloc(sizeof(char *) * (size_t)m->n_params);
  dt_tensor **tensors = dt__calloc(sizeof(dt_tensor *) * (size_t)m->n_params);
  dt_status st =
      names && tensors ? DT_OK : dt__error(DT_ERR_NOMEM, "dt_hf_model_save: out of memory");
  bool prev = dt_grad_mode_set(false);
  for (int i = 0; i < m->n_params && !st; i++) {
    if (m->params[i].part > 0) continue;
    st = gathered(m, i, &tensors[n]);
    names[n++] = m->params[i].file_name;
  }
  dt_grad_mode_set(prev);
  if (!st && writer) st = write_files(m, dir, n, names, tensors);
  if (m->mesh) st = agree(m, dir, st);
  dt__tensors_free(tensors, n);
  dt__free(names); /* the parameters' own names */
  return st;
}
