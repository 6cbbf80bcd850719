/*
 * config.json and model.safetensors.index.json of a Hugging Face model directory, read with
 * cJSON: the fields the architectures use, each checked, with a message naming the file
 * and the field.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core_impl.h"
#include "core/json_scanner.h"
#include "core/text_escape.h"
#include "models/models_impl.h"

#ifdef DT_HAVE_CJSON
#include <cjson/cJSON.h>
#endif

dt_status dt__hf_read_text(const char *path, char **out) {
  *out = NULL;
  /* O_NONBLOCK: a FIFO in the file's place must not block the open; only a regular file is
   * read (a directory or a device is refused by name). */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return dt__error(DT_ERR_IO, "dt_hf_model_load: cannot open %s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return dt__error(DT_ERR_IO, "dt_hf_model_load: %s is not a regular file", path);
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return dt__error(DT_ERR_IO, "dt_hf_model_load: cannot open %s: %s", path, strerror(errno));
  }
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      size_t ncap = cap ? cap * 2 : 65536;
      if (ncap > ((size_t)64 << 20)) {
        dt__free(buf);
        fclose(f);
        return dt__error(DT_ERR_INVALID, "dt_hf_model_load: %s is larger than 64 MiB", path);
      }
      char *nb = dt__alloc(ncap);
      if (!nb) {
        dt__free(buf);
        fclose(f);
        return dt__error(DT_ERR_NOMEM, "dt_hf_model_load: out of memory reading %s", path);
      }
      if (len) memcpy(nb, buf, len);
      dt__free(buf);
      buf = nb;
      cap = ncap;
    }
    size_t n = fread(buf + len, 1, cap - len - 1, f);
    len += n;
    if (n == 0) break;
  }
  bool bad = ferror(f) != 0;
  fclose(f);
  if (bad) {
    dt__free(buf);
    return dt__error(DT_ERR_IO, "dt_hf_model_load: cannot read %s", path);
  }
  buf[len] = '\0';
  *out = buf;
  return DT_OK;
}

#ifdef DT_HAVE_CJSON

/* A string of config.json escaped for a message (text_escape.h); two buffers, so that a
 * message can quote two values. Valid until the thread's next call. */
static _Thread_local char shown_buf[2][128];
static const char *shown(const char *s) {
  return dt__escape_text(shown_buf[0], sizeof shown_buf[0], s);
}
static const char *shown_2(const char *s) {
  return dt__escape_text(shown_buf[1], sizeof shown_buf[1], s);
}

/* Python's json reads a number written with a '.', 'e' or 'E' as a float ("2e0", "2.0",
 * "256.0000000000000001" are all floats there, whatever their value), and transformers then
 * fails or misbehaves on an int field; cJSON keeps only the value. So each such number's node
 * gets its spelling, in valuestring (which cJSON leaves NULL for a number and frees with the
 * node), by walking the text (checked by dt__hf_json_check: its members are cJSON's, in order)
 * alongside the tree. */
static dt_status mark_float_spellings(dt__json_scanner *r, cJSON *node) {
  dt__json_skip_ws(r);
  if (r->p >= r->end) return DT_OK;
  char c = *r->p;
  cJSON *child = node ? node->child : NULL;
  dt_status st = DT_OK;
  if (c == '{') {
    r->p++;
    bool first = true;
    dt__json_span key;
    while (dt__json_next_key(r, &first, &key, &st)) {
      st = mark_float_spellings(r, child);
      child = child ? child->next : NULL;
    }
    return st;
  }
  if (c == '[') {
    r->p++;
    dt__json_skip_ws(r);
    if (r->p < r->end && *r->p == ']') {
      r->p++;
      return DT_OK;
    }
    for (;;) {
      if ((st = mark_float_spellings(r, child))) return st;
      child = child ? child->next : NULL;
      dt__json_skip_ws(r);
      if (r->p < r->end && *r->p == ']') {
        r->p++;
        return DT_OK;
      }
      if (r->p >= r->end || *r->p != ',') return dt__json_expected(r, "',' or ']' in an array");
      r->p++;
    }
  }
  if (c != '-' && (c < '0' || c > '9')) return dt__json_skip_value(r);
  const char *start = r->p;
  double value = 0;
  if ((st = dt__json_number(r, &value, NULL))) return st;
  size_t n = (size_t)(r->p - start);
  bool integer_spelling = true;
  for (size_t i = 0; i < n; i++) integer_spelling &= !strchr(".eE", start[i]);
  if (integer_spelling || !cJSON_IsNumber(node) || node->valuestring) return DT_OK;
  node->valuestring = cJSON_malloc(n + 1);
  if (!node->valuestring) return dt__error(DT_ERR_NOMEM, "out of memory");
  memcpy(node->valuestring, start, n);
  node->valuestring[n] = '\0';
  return DT_OK;
}

/* A JSON number that is an integer in [min, 4e15] (the range a double holds exactly), written
 * as one (see mark_float_spellings). */
static dt_status int_value(const cJSON *v, const char *key, int64_t min, const char *path,
                           int64_t *out) {
  if (cJSON_IsNumber(v) && v->valuestring)
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s: \"%s\" must be an integer, written as one: %s is a "
                     "float to Python's json, which transformers does not take for an int field",
                     path, key, shown(v->valuestring));
  double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  if (!(d >= (double)min && d <= 4.0e15) || d != floor(d))
    return dt__error(DT_ERR_INVALID, "dt_hf_model_load: %s: \"%s\" must be an integer >= %lld",
                     path, key, (long long)min);
  *out = (int64_t)d;
  return DT_OK;
}

/* An integer field: required (def < -1 means required), else def when absent or null. */
static dt_status get_int(const cJSON *root, const char *key, int64_t def, int64_t min,
                         const char *path, int64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v || cJSON_IsNull(v)) {
    if (def < -1)
      return dt__error(DT_ERR_INVALID, "dt_hf_model_load: %s lacks the field \"%s\"", path, key);
    *out = def;
    return DT_OK;
  }
  return int_value(v, key, min, path, out);
}

static dt_status get_double(const cJSON *root, const char *key, double def, const char *path,
                            double *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v || cJSON_IsNull(v)) {
    if (isnan(def))
      return dt__error(DT_ERR_INVALID, "dt_hf_model_load: %s lacks the field \"%s\"", path, key);
    *out = def;
    return DT_OK;
  }
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
    return dt__error(DT_ERR_INVALID, "dt_hf_model_load: %s: \"%s\" must be a number", path, key);
  *out = v->valuedouble;
  return DT_OK;
}

/* A norm's epsilon that is not > 0: a negative one is refused by the norm ops at the first
 * forward, naming no file, and 0 divides by zero on an all-zero row (NaN). */
static dt_status bad_eps(const char *path, const char *key, double eps) {
  return dt__error(DT_ERR_INVALID, "dt_hf_model_load: %s: \"%s\" %g must be > 0", path, key, eps);
}

/* A required number of a rope_scaling object that the rotary tables (float32) divide by: a
 * normal positive float32 (1e-44 is a float32 denormal whose quotients overflow to inf). */
static dt_status get_rope_divisor(const cJSON *scaling, const char *object, const char *key,
                                  const char *path, double *out) {
  char field[64];
  snprintf(field, sizeof field, "%s.%s", object, key);
  dt_status st = get_double(scaling, key, NAN, path, out);
  if (st) return st;
  float f = (float)*out;
  if (!(f >= FLT_MIN) || !isfinite(f))
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s: \"%s\" %g must be a positive normal float32 (%g to "
                     "%g): the rotary tables divide by it",
                     path, field, *out, (double)FLT_MIN, (double)FLT_MAX);
  return DT_OK;
}

static bool get_bool(const cJSON *root, const char *key, bool def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
  return def;
}

static const char *get_string(const cJSON *root, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* rope_parameters (transformers 5) or rope_scaling + rope_theta (earlier). */
static dt_status parse_rope(const cJSON *root, const char *path, dt_hf_config *cfg) {
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
  dt_status st = get_double(root, "rope_theta", 10000.0, path, &cfg->rope_theta);
  if (!st && cJSON_IsObject(rp))
    st = get_double(rp, "rope_theta", cfg->rope_theta, path, &cfg->rope_theta);
  /* The rotary tables are computed in float32 (as transformers does): a value that is 0 there
   * gave infinite frequencies and NaN logits. */
  if (!st && (!((float)cfg->rope_theta > 0) || !isfinite((float)cfg->rope_theta)))
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s: \"rope_theta\" %g must be > 0 and finite in float32 "
                     "(the rotary tables' precision)",
                     path, cfg->rope_theta);
  const cJSON *scaling = cJSON_IsObject(rp) ? rp : cJSON_IsObject(rs) ? rs : NULL;
  if (st || !scaling) return st;
  const char *type = get_string(scaling, "rope_type");
  if (!type) type = get_string(scaling, "type");
  if (!type || !strcmp(type, "default")) return DT_OK;
  if (strcmp(type, "llama3") != 0)
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_hf_model_load: %s: rope_type \"%s\" is not supported (default, llama3)",
                     path, shown(type));
  const char *object = scaling == rp ? "rope_parameters" : "rope_scaling";
  st = get_rope_divisor(scaling, object, "factor", path, &cfg->rope_factor);
  if (!st)
    st = get_rope_divisor(scaling, object, "low_freq_factor", path, &cfg->rope_low_freq_factor);
  if (!st)
    st = get_rope_divisor(scaling, object, "high_freq_factor", path, &cfg->rope_high_freq_factor);
  if (!st)
    st = get_int(scaling, "original_max_position_embeddings", -2, 1, path,
                 &cfg->rope_original_max_positions);
  if (!st && !((float)cfg->rope_high_freq_factor > (float)cfg->rope_low_freq_factor))
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s: llama3 rope_scaling needs high_freq_factor > "
                     "low_freq_factor in float32 (got %g, %g): the smoothing divides by their "
                     "difference",
                     path, cfg->rope_high_freq_factor, cfg->rope_low_freq_factor);
  return st;
}

static dt_status parse_llama(const cJSON *root, const char *path, dt_hf_config *cfg) {
  const char *act = get_string(root, "hidden_act");
  if (act && strcmp(act, "silu") != 0)
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_hf_model_load: %s: hidden_act \"%s\" is not supported (silu)", path,
                     shown(act));
  dt_status st = get_int(root, "vocab_size", -2, 1, path, &cfg->vocab_size);
  if (!st) st = get_int(root, "hidden_size", -2, 1, path, &cfg->hidden_size);
  if (!st) st = get_int(root, "intermediate_size", -2, 1, path, &cfg->intermediate_size);
  if (!st) st = get_int(root, "num_hidden_layers", -2, 1, path, &cfg->num_layers);
  if (!st) st = get_int(root, "num_attention_heads", -2, 1, path, &cfg->num_heads);
  if (!st) st = get_int(root, "num_key_value_heads", cfg->num_heads, 1, path, &cfg->num_kv_heads);
  if (!st && cfg->hidden_size % cfg->num_heads != 0 &&
      !cJSON_GetObjectItemCaseSensitive(root, "head_dim"))
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s: hidden_size %lld is not a multiple of "
                     "num_attention_heads %lld and head_dim is absent",
                     path, (long long)cfg->hidden_size, (long long)cfg->num_heads);
  if (!st)
    st = get_int(root, "head_dim", cfg->hidden_size / cfg->num_heads, 1, path, &cfg->head_dim);
  if (!st) st = get_int(root, "max_position_embeddings", 2048, 1, path, &cfg->max_positions);
  if (!st) st = get_double(root, "rms_norm_eps", 1e-6, path, &cfg->norm_eps);
  if (!st && !(cfg->norm_eps > 0)) return bad_eps(path, "rms_norm_eps", cfg->norm_eps);
  if (!st) st = parse_rope(root, path, cfg);
  if (st) return st;
  if (cfg->num_heads % cfg->num_kv_heads != 0)
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s: num_attention_heads %lld is not a multiple of "
                     "num_key_value_heads %lld",
                     path, (long long)cfg->num_heads, (long long)cfg->num_kv_heads);
  if (cfg->head_dim > (int64_t)4e15 / cfg->num_heads)
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s: num_attention_heads %lld x head_dim %lld is too large",
                     path, (long long)cfg->num_heads, (long long)cfg->head_dim);
  if (cfg->head_dim % 2 != 0)
    return dt__error(DT_ERR_INVALID, "dt_hf_model_load: %s: head_dim %lld must be even (rotary)",
                     path, (long long)cfg->head_dim);
  cfg->tie_word_embeddings = get_bool(root, "tie_word_embeddings", false);
  cfg->attention_bias = get_bool(root, "attention_bias", false);
  cfg->mlp_bias = get_bool(root, "mlp_bias", false);
  return DT_OK;
}

static dt_status parse_gpt2(const cJSON *root, const char *path, dt_hf_config *cfg) {
  const char *act = get_string(root, "activation_function");
  if (act && strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_hf_model_load: %s: activation_function \"%s\" is not supported "
                     "(gelu_new, gelu_pytorch_tanh)",
                     path, shown(act));
  if (get_bool(root, "scale_attn_by_inverse_layer_idx", false) ||
      !get_bool(root, "scale_attn_weights", true))
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_hf_model_load: %s: scale_attn_by_inverse_layer_idx or "
                     "scale_attn_weights=false is not supported",
                     path);
  dt_status st = get_int(root, "vocab_size", -2, 1, path, &cfg->vocab_size);
  if (!st) st = get_int(root, "n_embd", -2, 1, path, &cfg->hidden_size);
  if (!st) st = get_int(root, "n_layer", -2, 1, path, &cfg->num_layers);
  if (!st) st = get_int(root, "n_head", -2, 1, path, &cfg->num_heads);
  if (!st) st = get_int(root, "n_inner", -1, 1, path, &cfg->intermediate_size);
  if (!st) st = get_int(root, "n_positions", -2, 1, path, &cfg->max_positions);
  if (!st) st = get_double(root, "layer_norm_epsilon", 1e-5, path, &cfg->norm_eps);
  if (!st && !(cfg->norm_eps > 0)) return bad_eps(path, "layer_norm_epsilon", cfg->norm_eps);
  if (st) return st;
  if (cfg->intermediate_size < 0) cfg->intermediate_size = 4 * cfg->hidden_size;
  if (cfg->hidden_size % cfg->num_heads != 0)
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s: n_embd %lld is not a multiple of n_head %lld", path,
                     (long long)cfg->hidden_size, (long long)cfg->num_heads);
  cfg->num_kv_heads = cfg->num_heads;
  cfg->head_dim = cfg->hidden_size / cfg->num_heads;
  cfg->tie_word_embeddings = get_bool(root, "tie_word_embeddings", true);
  cfg->attention_bias = true;
  cfg->mlp_bias = true;
  return DT_OK;
}

/* Qwen3's sliding window applies to the layers past max_window_layers only: not built. */
static dt_status no_qwen_sliding(const cJSON *root, const char *path) {
  if (!get_bool(root, "use_sliding_window", false)) return DT_OK;
  return dt__error(DT_ERR_UNSUPPORTED,
                   "dt_hf_model_load: %s: \"use_sliding_window\" true is not supported for Qwen3 "
                   "(its window applies to some layers only)",
                   path);
}

static dt_status parse_qwen3(const cJSON *root, const char *path, dt_hf_config *cfg) {
  dt_status st = parse_llama(root, path, cfg);
  if (!st) st = no_qwen_sliding(root, path);
  cfg->qk_norm = true;
  return st;
}

/* sliding_window: a number of keys >= 1, or null (or absent): none. */
static dt_status parse_mistral(const cJSON *root, const char *path, dt_hf_config *cfg) {
  dt_status st = parse_llama(root, path, cfg);
  if (!st) st = get_int(root, "sliding_window", 0, 1, path, &cfg->sliding_window);
  return st;
}

/* The experts of a MoE config: n_key experts (>= 1, at most 4096), num_experts_per_tok of
 * them per token (1..experts), router_aux_loss_coef >= 0. */
static dt_status parse_experts(const cJSON *root, const char *path, const char *n_key,
                               dt_hf_config *cfg) {
  dt_status st = get_int(root, n_key, -2, 1, path, &cfg->num_experts);
  if (!st) st = get_int(root, "num_experts_per_tok", -2, 1, path, &cfg->num_experts_per_tok);
  if (!st) st = get_double(root, "router_aux_loss_coef", 0.001, path, &cfg->router_aux_loss_coef);
  if (st) return st;
  if (cfg->num_experts > 4096 || cfg->num_experts_per_tok > cfg->num_experts)
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s: \"%s\" %lld must be in 1..4096 and "
                     "\"num_experts_per_tok\" %lld at most that",
                     path, n_key, (long long)cfg->num_experts, (long long)cfg->num_experts_per_tok);
  if (!(cfg->router_aux_loss_coef >= 0))
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s: \"router_aux_loss_coef\" %g must be >= 0", path,
                     cfg->router_aux_loss_coef);
  return DT_OK;
}

/* Mixtral: every layer's MLP is num_local_experts SwiGLU experts of intermediate_size, the
 * chosen weights always renormalised; router_jitter_noise (training noise) must be 0. */
static dt_status parse_mixtral(const cJSON *root, const char *path, dt_hf_config *cfg) {
  dt_status st = parse_mistral(root, path, cfg);
  if (!st) st = parse_experts(root, path, "num_local_experts", cfg);
  double jitter = 0;
  if (!st) st = get_double(root, "router_jitter_noise", 0, path, &jitter);
  if (!st && jitter != 0)
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_hf_model_load: %s: \"router_jitter_noise\" %g is not supported (0)", path,
                     jitter);
  cfg->moe_intermediate_size = cfg->intermediate_size;
  cfg->norm_topk_prob = true;
  return st;
}

/* Qwen3-MoE: Qwen3's attention, every layer's MLP sparse (decoder_sparse_step 1, no
 * mlp_only_layers: the dense layers between sparse ones are not built). */
static dt_status parse_qwen3_moe(const cJSON *root, const char *path, dt_hf_config *cfg) {
  dt_status st = parse_qwen3(root, path, cfg);
  const char *n_key =
      cJSON_GetObjectItemCaseSensitive(root, "num_experts") ? "num_experts" : "num_local_experts";
  if (!st) st = parse_experts(root, path, n_key, cfg);
  if (!st) st = get_int(root, "moe_intermediate_size", -2, 1, path, &cfg->moe_intermediate_size);
  int64_t step = 1;
  if (!st) st = get_int(root, "decoder_sparse_step", 1, 1, path, &step);
  const cJSON *dense = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
  if (!st && (step != 1 || (dense && !cJSON_IsNull(dense) &&
                            !(cJSON_IsArray(dense) && cJSON_GetArraySize(dense) == 0))))
    return dt__error(DT_ERR_UNSUPPORTED,
                     "dt_hf_model_load: %s: \"decoder_sparse_step\" %lld or a non-empty "
                     "\"mlp_only_layers\" is not supported (every layer sparse: 1, [])",
                     path, (long long)step);
  cfg->norm_topk_prob = get_bool(root, "norm_topk_prob", false);
  return st;
}

/* A special token id (entry `index` of a list, -1: a single id) must be a token of the
 * vocabulary: an eos id outside it can never be generated, and generation asked to stop there
 * would run to its length; a bos id outside it cannot be embedded. */
static dt_status check_token_id(const char *path, const char *key, int index, int64_t id,
                                const dt_hf_config *cfg) {
  if (id < cfg->vocab_size) return DT_OK;
  char where[32] = "";
  if (index >= 0) snprintf(where, sizeof where, "[%d]", index);
  return dt__error(DT_ERR_INVALID,
                   "dt_hf_model_load: %s: \"%s\"%s is %lld, outside [0, vocab_size %lld)", path,
                   key, where, (long long)id, (long long)cfg->vocab_size);
}

static dt_status check_eos_ids(const char *path, const dt_hf_config *cfg, bool list) {
  dt_status st = DT_OK;
  for (int i = 0; i < cfg->n_eos_token_ids && !st; i++)
    st = check_token_id(path, "eos_token_id", list ? i : -1, cfg->eos_token_ids[i], cfg);
  return st;
}

/* eos_token_id: one id, or a list of them (Llama 3: generation stops at any). */
static dt_status parse_eos(const cJSON *root, const char *path, dt_hf_config *cfg) {
  const cJSON *eos = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
  cfg->n_eos_token_ids = 0;
  if (!cJSON_IsArray(eos)) {
    dt_status st = get_int(root, "eos_token_id", -1, 0, path, &cfg->eos_token_id);
    if (!st && cfg->eos_token_id >= 0)
      cfg->eos_token_ids[cfg->n_eos_token_ids++] = cfg->eos_token_id;
    return st ? st : check_eos_ids(path, cfg, false);
  }
  int n = cJSON_GetArraySize(eos);
  if (n > DT_HF_MAX_EOS)
    return dt__error(DT_ERR_INVALID,
                     "dt_hf_model_load: %s: \"eos_token_id\" lists %d ids, more than %d", path, n,
                     DT_HF_MAX_EOS);
  for (int i = 0; i < n; i++) {
    dt_status st =
        int_value(cJSON_GetArrayItem(eos, i), "eos_token_id", 0, path, &cfg->eos_token_ids[i]);
    if (st) return st;
  }
  cfg->n_eos_token_ids = n;
  cfg->eos_token_id = n > 0 ? cfg->eos_token_ids[0] : -1;
  return check_eos_ids(path, cfg, true);
}

dt_status dt__hf_config_parse(const char *text, const char *path, dt_hf_config *cfg,
                              const dt__hf_family **family) {
  memset(cfg, 0, sizeof *cfg);
  *family = NULL;
  dt_status checked = dt__hf_json_check(text, path, NULL);
  if (checked) return checked;
  cJSON *root = cJSON_Parse(text);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return dt__error(DT_ERR_INVALID, "dt_hf_model_load: %s is not a JSON object", path);
  }
  dt__json_scanner r = {.begin = text, .p = text, .end = text + strlen(text)};
  dt_status marked = mark_float_spellings(&r, root);
  dt__free(r.scratch);
  if (marked) {
    cJSON_Delete(root);
    if (marked == DT_ERR_NOMEM) return marked;
    char where[160];
    snprintf(where, sizeof where, "dt_hf_model_load: %s", path);
    dt__error_prefix(where);
    return marked;
  }
  /* The boolean fields any family reads: true, false or null (the default), nothing else (1,
   * "true" and "false" mean other things to transformers than to a default). */
  static const char *const bools[] = {"attention_bias",     "mlp_bias",
                                      "norm_topk_prob",     "scale_attn_by_inverse_layer_idx",
                                      "scale_attn_weights", "tie_word_embeddings",
                                      "use_sliding_window"};
  for (size_t i = 0; i < sizeof bools / sizeof *bools; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, bools[i]);
    if (v && !cJSON_IsBool(v) && !cJSON_IsNull(v)) {
      cJSON_Delete(root);
      return dt__error(DT_ERR_INVALID, "dt_hf_model_load: %s: %s must be true, false or null", path,
                       bools[i]);
    }
  }
  const char *arch = NULL;
  const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
  if (cJSON_IsArray(archs) && cJSON_GetArraySize(archs) > 0 &&
      cJSON_IsString(cJSON_GetArrayItem(archs, 0)))
    arch = cJSON_GetArrayItem(archs, 0)->valuestring;
  const char *type = get_string(root, "model_type");
  /* The loader's table: the architectures config.json may name, each read by its own reader
   * and built by its family (llama.c, gpt2.c). */
  static const struct {
    const char *architecture, *model_type;
    dt_status (*read)(const cJSON *root, const char *path, dt_hf_config *cfg);
    const dt__hf_family *family;
  } families[] = {
      {"LlamaForCausalLM", "llama", parse_llama, &dt__hf_llama},
      {"GPT2LMHeadModel", "gpt2", parse_gpt2, &dt__hf_gpt2},
      {"Qwen3ForCausalLM", "qwen3", parse_qwen3, &dt__hf_qwen3},
      {"MistralForCausalLM", "mistral", parse_mistral, &dt__hf_mistral},
      {"MixtralForCausalLM", "mixtral", parse_mixtral, &dt__hf_mixtral},
      {"Qwen3MoeForCausalLM", "qwen3_moe", parse_qwen3_moe, &dt__hf_qwen3_moe},
  };
  const size_t n_families = sizeof families / sizeof families[0];
  size_t f = 0;
  while (f < n_families && !(arch ? !strcmp(arch, families[f].architecture)
                                  : type && !strcmp(type, families[f].model_type)))
    f++;
  dt_status st;
  if (f < n_families) {
    cfg->arch = families[f].family->arch;
    *family = families[f].family;
    st = families[f].read(root, path, cfg);
  } else {
    st = dt__error(DT_ERR_UNSUPPORTED,
                   "dt_hf_model_load: %s: architecture \"%s\" (model_type \"%s\") is not "
                   "supported (LlamaForCausalLM, GPT2LMHeadModel, Qwen3ForCausalLM, "
                   "MistralForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM)",
                   path, arch ? shown(arch) : "?", type ? shown_2(type) : "?");
  }
  if (!st) st = get_int(root, "bos_token_id", -1, 0, path, &cfg->bos_token_id);
  if (!st) st = check_token_id(path, "bos_token_id", -1, cfg->bos_token_id, cfg);
  if (!st) st = parse_eos(root, path, cfg);
  cJSON_Delete(root);
  return st;
}

#else

dt_status dt__hf_config_parse(const char *text, const char *path, dt_hf_config *cfg,
                              const dt__hf_family **family) {
  (void)text;
  memset(cfg, 0, sizeof *cfg);
  *family = NULL;
  return dt__error(DT_ERR_UNSUPPORTED,
                   "dt_hf_model_load: cannot read %s: libdtensor was built without cJSON", path);
}

#endif
