/*
 * dt_hf_model_load and dt_hf_generate given hostile input: config.json or the index as a FIFO
 * or a directory, an index naming a missing file, config values whose products overflow, an
 * eos_token_id list or a bos_token_id holding a value no token id can be, prompt and generation
 * lengths whose sum overflows, rope_theta <= 0 or a negative norm epsilon, a temperature so small
 * the scaled logits overflow, NaN logits. Each must be refused with a message naming the file or
 * argument, never a hang or undefined behaviour. The model files come from ../shared/fixtures/hf,
 * linked in place.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm_helpers.h" /* rank threads report failures with dt__error */
#include "dtensor/dtensor.h"
#include "fixture_main.h"
#include "fs_helpers.h"

#define HF DT_FIXTURES_DIR "/hf"

static bool hf_present(void) {
  FILE *f = fopen(HF "/expected.json", "r");
  if (f) fclose(f);
  return f != NULL;
}

#define SKIP_WITHOUT_FIXTURES()                                                                    \
  do {                                                                                             \
    if (!hf_present()) cr_skip_test("the hf fixtures are absent (%s)", HF);                        \
  } while (0)

static void path_in(char *buf, size_t size, const char *dir, const char *name) {
  snprintf(buf, size, "%s/%s", dir, name);
}

static void write_text(const char *dir, const char *name, const char *text) {
  char path[512];
  path_in(path, sizeof path, dir, name);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
}

/* A fresh directory whose model.safetensors links to the tiny Llama's. */
static void llama_dir(char *dir, size_t size) {
  snprintf(dir, size, "/tmp/dt_hf_errors_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  char path[512];
  path_in(path, sizeof path, dir, "model.safetensors");
  cr_assert_eq(symlink(HF "/llama_tiny/model.safetensors", path), 0);
}

static void remove_dir(const char *dir) {
  cr_assert_eq(fs_remove_tree(dir), 0, "removing %s: %s", dir, strerror(errno));
}

static void expect_load_error(const char *dir, dt_status want, const char *w1, const char *w2) {
  dt_hf_model *m = NULL;
  dt_status st = dt_hf_model_load(dir, NULL, NULL, &m);
  cr_assert_eq(st, want, "status %s: %s", dt_status_string(st), dt_last_error());
  cr_assert_null(m);
  cr_assert(strstr(dt_last_error(), "dt_hf_model_load"), "%s", dt_last_error());
  cr_assert(strstr(dt_last_error(), w1), "message lacks \"%s\": %s", w1, dt_last_error());
  if (w2) cr_assert(strstr(dt_last_error(), w2), "message lacks \"%s\": %s", w2, dt_last_error());
}

/* The tiny Llama's config.json with `extra` fields added at the end (later keys are not read:
 * cJSON finds the first, so extra replaces only fields the fixture lacks). */
static const char LLAMA_HEAD[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 160, "
    "\"max_position_embeddings\": 256, \"num_hidden_layers\": 2, \"vocab_size\": 256, "
    "\"rms_norm_eps\": 1e-05, \"num_key_value_heads\": 2";

static void write_llama_config(const char *dir, const char *extra) {
  char text[1024];
  snprintf(text, sizeof text, "%s, %s}", LLAMA_HEAD, extra);
  write_text(dir, "config.json", text);
}

Test(hf_model_errors, config_json_fifo_or_directory_is_refused, .timeout = 30) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64], path[512];
  llama_dir(dir, sizeof dir);
  path_in(path, sizeof path, dir, "config.json");
  cr_assert_eq(mkfifo(path, 0600), 0);
  expect_load_error(dir, DT_ERR_IO, "config.json", "not a regular file");
  cr_assert_eq(remove(path), 0);
  cr_assert_eq(mkdir(path, 0700), 0);
  expect_load_error(dir, DT_ERR_IO, "config.json", "not a regular file");
  cr_assert_eq(rmdir(path), 0);
  remove_dir(dir);
}

/* An index of the tiny Llama's tensors, all in model.safetensors but `tensor`, in `file`. */
static void write_index_with(const char *dir, const char *tensor, const char *file) {
  dt_safetensors *f = NULL;
  cr_assert_eq(dt_safetensors_open(HF "/llama_tiny/model.safetensors", &f), DT_OK);
  char text[8192];
  size_t used = (size_t)snprintf(text, sizeof text, "{\"weight_map\": {");
  for (int i = 0; i < dt_safetensors_count(f); i++) {
    dt_safetensors_entry_info e;
    cr_assert_eq(dt_safetensors_entry(f, i, &e), DT_OK);
    used += (size_t)snprintf(text + used, sizeof text - used, "%s\"%s\": \"%s\"", i ? ", " : "",
                             e.name, strcmp(e.name, tensor) ? "model.safetensors" : file);
  }
  snprintf(text + used, sizeof text - used, "}}");
  dt_safetensors_destroy(f);
  write_text(dir, "model.safetensors.index.json", text);
}

Test(hf_model_errors, index_fifo_or_missing_shard_is_refused, .timeout = 30) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64], path[512];
  llama_dir(dir, sizeof dir);
  path_in(path, sizeof path, dir, "config.json");
  cr_assert_eq(symlink(HF "/llama_tiny/config.json", path), 0);
  /* The unsharded checkpoint loads. */
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  dt_hf_model_destroy(m);
  path_in(path, sizeof path, dir, "model.safetensors.index.json");
  cr_assert_eq(mkfifo(path, 0600), 0);
  expect_load_error(dir, DT_ERR_IO, "model.safetensors.index.json", "not a regular file");
  cr_assert_eq(remove(path), 0);
  /* An index naming a file that is not there: the file is named. Every tensor is listed (an
   * index with fewer tensors than the config's layers need is refused before any is read). */
  write_index_with(dir, "model.embed_tokens.weight", "model-00001-of-00002.safetensors");
  dt_status st = dt_hf_model_load(dir, NULL, NULL, &m);
  cr_assert_eq(st, DT_ERR_IO, "%s: %s", dt_status_string(st), dt_last_error());
  cr_assert(strstr(dt_last_error(), "model-00001-of-00002.safetensors"), "%s", dt_last_error());
  /* An index naming the directory itself or its parent. */
  write_text(dir, "model.safetensors.index.json",
             "{\"weight_map\": {\"model.embed_tokens.weight\": \"..\"}}");
  st = dt_hf_model_load(dir, NULL, NULL, &m);
  cr_assert_neq(st, DT_OK);
  cr_assert_null(m);
  remove_dir(dir);
}

Test(hf_model_errors, config_products_that_overflow_are_refused) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir);
  /* 3e15 heads of 4e15 dims: q_proj's rows overflow int64. */
  write_llama_config(dir, "\"num_attention_heads\": 3000000000000000, "
                          "\"head_dim\": 4000000000000000");
  expect_load_error(dir, DT_ERR_INVALID, "config.json", "head_dim");
  remove_dir(dir);
}

Test(hf_model_errors, eos_token_id_list_entries_are_checked) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir);
  const char *bad[] = {"[1e300]", "[-5]", "[2.5]", "[\"2\"]"};
  for (int i = 0; i < 4; i++) {
    char extra[128];
    snprintf(extra, sizeof extra, "\"num_attention_heads\": 4, \"eos_token_id\": %s", bad[i]);
    write_llama_config(dir, extra);
    expect_load_error(dir, DT_ERR_INVALID, "config.json", "eos_token_id");
  }
  /* A list's first id is the one generation stops at. */
  write_llama_config(dir, "\"num_attention_heads\": 4, \"eos_token_id\": [7, 2]");
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_hf_model_config(m)->eos_token_id, 7);
  dt_hf_model_destroy(m);
  remove_dir(dir);
}

Test(hf_model_errors, generate_lengths_that_overflow_are_refused) {
  SKIP_WITHOUT_FIXTURES();
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(HF "/llama_tiny", NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  int64_t prompt[2] = {1, 2}, out[8], n = 0;
  dt_status st = dt_hf_generate(m, prompt, 2, INT64_MAX, NULL, out, &n, NULL, NULL);
  cr_assert_eq(st, DT_ERR_INVALID, "%s", dt_last_error());
  cr_assert(strstr(dt_last_error(), "max_positions"), "%s", dt_last_error());
  st = dt_hf_generate(m, prompt, INT64_MAX, 1, NULL, out, &n, NULL, NULL);
  cr_assert_eq(st, DT_ERR_INVALID, "%s", dt_last_error());
  cr_assert(strstr(dt_last_error(), "max_positions"), "%s", dt_last_error());
  dt_hf_model_destroy(m);
}

/* The weights cannot be written (model.safetensors is a directory): the save fails naming it
 * and config.json keeps its old contents (it was rewritten before the weights failed). */
Test(hf_model_errors, a_failed_save_leaves_config_json_whole) {
  SKIP_WITHOUT_FIXTURES();
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(HF "/llama_tiny", NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  char dir[64], path[512];
  snprintf(dir, sizeof dir, "/tmp/dt_hf_errors_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  write_text(dir, "config.json", "{\"old\": true}");
  path_in(path, sizeof path, dir, "model.safetensors");
  cr_assert_eq(mkdir(path, 0700), 0);
  dt_status st = dt_hf_model_save(m, dir);
  cr_assert_eq(st, DT_ERR_IO, "%s: %s", dt_status_string(st), dt_last_error());
  cr_assert(strstr(dt_last_error(), "model.safetensors"), "%s", dt_last_error());
  /* Named for the function called, not the one inside it. */
  cr_assert(strncmp(dt_last_error(), "dt_hf_model_save: ", 18) == 0, "%s", dt_last_error());
  cr_assert(!strstr(dt_last_error(), "dt_safetensors_save"), "%s", dt_last_error());
  path_in(path, sizeof path, dir, "config.json");
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  char text[64] = {0};
  size_t got = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  cr_assert_str_eq(text, "{\"old\": true}", "config.json now holds %zu bytes: %s", got, text);
  /* Into a fresh directory the save works and reloads. */
  remove_dir(dir);
  cr_assert_eq(dt_hf_model_save(m, dir), DT_OK, "%s", dt_last_error());
  dt_hf_model *back = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &back), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_hf_model_param_count(back), dt_hf_model_param_count(m));
  dt_hf_model_destroy(back);
  dt_hf_model_destroy(m);
  remove_dir(dir);
}

/* On a mesh only the rank at coordinate 0 writes; when it fails, every rank fails. */
static dt_status failing_save_rank(dt_comm *world, void *arg) {
  const char *dir = arg;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"tp"}, &mesh);
  dt_hf_model *m = NULL;
  dt_hf_plan plan = {.tp = "tp"};
  if (!st) st = dt_hf_model_load(HF "/llama_tiny", mesh, &plan, &m);
  if (st) {
    dt_mesh_destroy(mesh);
    return dt__error(DT_ERR_INTERNAL, "setup: %s", dt_last_error());
  }
  st = dt_hf_model_save(m, dir);
  char message[512];
  snprintf(message, sizeof message, "%s", dt_last_error());
  int rank = dt_comm_rank(world);
  dt_hf_model_destroy(m);
  dt_mesh_destroy(mesh);
  if (st != DT_ERR_IO || !strstr(message, dir)) {
    return dt__error(DT_ERR_INTERNAL, "rank %d: save returned %s: %s", rank, dt_status_string(st),
                     message);
  }
  return DT_OK;
}

Test(hf_model_errors, every_rank_returns_the_writers_failure, .timeout = 60) {
  SKIP_WITHOUT_FIXTURES();
  /* The target is a regular file: the writer cannot make the directory. */
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/dt_hf_errors_file_XXXXXX");
  int fd = mkstemp(dir);
  cr_assert_geq(fd, 0);
  close(fd);
  dt_status st = dt_comm_spawn(2, failing_save_rank, dir);
  cr_assert_eq(st, DT_OK, "%s", dt_last_error());
  remove(dir);
}

/* rope_theta <= 0 (NaN rotary tables) and a negative norm epsilon (refused by the norm op at the
 * first forward, naming no file) are refused at load, naming config.json and the field. */
Test(hf_model_errors, rope_theta_and_norm_eps_out_of_range_are_refused) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir);
  const char *theta[] = {
      "\"rope_theta\": 0", "\"rope_theta\": -5",
      "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 0}",
      "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": -1e308}",
      /* 0 in float32, where the rotary tables are computed: NaN logits before. */
      "\"rope_theta\": 1e-300"};
  for (int i = 0; i < 5; i++) {
    char extra[256];
    snprintf(extra, sizeof extra, "\"num_attention_heads\": 4, %s", theta[i]);
    write_llama_config(dir, extra);
    expect_load_error(dir, DT_ERR_INVALID, "config.json", "\"rope_theta\"");
  }
  /* LLAMA_HEAD sets rms_norm_eps; a config without it (default 1e-6) but a negative one. */
  write_text(dir, "config.json",
             "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
             "\"intermediate_size\": 160, \"num_hidden_layers\": 2, \"vocab_size\": 256, "
             "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"rms_norm_eps\": -1}");
  expect_load_error(dir, DT_ERR_INVALID, "config.json", "\"rms_norm_eps\" -1");
  write_text(dir, "config.json",
             "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 64, \"n_layer\": 2, "
             "\"n_head\": 4, \"n_positions\": 64, \"vocab_size\": 256, "
             "\"layer_norm_epsilon\": -0.5}");
  expect_load_error(dir, DT_ERR_INVALID, "config.json", "\"layer_norm_epsilon\" -0.5");
  /* llama3 scaling factors that are 0 in float32 (or equal there) divided by zero. */
  const char *scaling[] = {"1e-300, \"low_freq_factor\": 1, \"high_freq_factor\": 4",
                           "8, \"low_freq_factor\": 1e-300, \"high_freq_factor\": 4",
                           "8, \"low_freq_factor\": 1, \"high_freq_factor\": 1.00000000001"};
  const char *named[] = {"\"rope_scaling.factor\" 1e-300", "\"rope_scaling.low_freq_factor\"",
                         "llama3 rope_scaling"};
  for (int i = 0; i < 3; i++) {
    char extra[320];
    snprintf(extra, sizeof extra,
             "\"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": \"llama3\", "
             "\"original_max_position_embeddings\": 64, \"factor\": %s}",
             scaling[i]);
    write_llama_config(dir, extra);
    expect_load_error(dir, DT_ERR_INVALID, "config.json", named[i]);
  }
  /* The fixture's own values still load. */
  write_llama_config(dir, "\"num_attention_heads\": 4, \"rope_theta\": 10000.0");
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_hf_model_config(m)->rope_theta, 10000.0);
  dt_hf_model_destroy(m);
  remove_dir(dir);
}

/* A tiny temperature: the logits divided by it overflowed to +-inf, the weights became
 * exp(inf - inf) = NaN and the draw took the least likely kept token. Now the limit holds:
 * every seed, with or without top-k / top-p, gives the greedy ids. Logits that are NaN (a
 * diverged model) are refused, naming the step, instead of drawing from no distribution. */
Test(hf_model_errors, tiny_temperature_samples_the_greedy_ids_and_nan_logits_are_refused) {
  SKIP_WITHOUT_FIXTURES();
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(HF "/llama_tiny", NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  int64_t prompt[3] = {1, 5, 7}, greedy[12], out[12], n_greedy = 0, n = 0;
  cr_assert_eq(dt_hf_generate(m, prompt, 3, 8, NULL, greedy, &n_greedy, NULL, NULL), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(n_greedy, 11);
  const double temps[] = {1e-320, 1e-300, 1e-30};
  for (int t = 0; t < 3; t++) {
    for (uint64_t seed = 0; seed < 3; seed++) {
      dt_hf_sampling s = {.temperature = temps[t], .seed = seed};
      if (seed == 1) s.top_k = 5;
      if (seed == 2) s.top_p = 0.5;
      cr_assert_eq(dt_hf_generate(m, prompt, 3, 8, &s, out, &n, NULL, NULL), DT_OK, "%s",
                   dt_last_error());
      cr_assert_eq(n, n_greedy);
      for (int64_t i = 0; i < n; i++)
        cr_assert_eq(out[i], greedy[i], "temperature %g seed %d: id %lld is %lld, greedy %lld",
                     temps[t], (int)seed, (long long)i, (long long)out[i], (long long)greedy[i]);
    }
  }
  /* NaN weights in every parameter: NaN logits. */
  for (int i = 0; i < dt_hf_model_param_count(m); i++) {
    dt_tensor *p = dt_hf_model_param(m, i, NULL);
    float *d = dt_tensor_data(p);
    for (int64_t j = 0; j < dt_tensor_numel(p); j++) d[j] = NAN;
  }
  dt_hf_sampling s = {.temperature = 0.8, .seed = 3};
  cr_assert_eq(dt_hf_generate(m, prompt, 3, 2, &s, out, &n, NULL, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_hf_generate: the logits of step 0 hold nan"), "%s",
            dt_last_error());
  /* Greedy too: argmax over NaN picked id 0 silently. */
  cr_assert_eq(dt_hf_generate(m, prompt, 3, 2, NULL, out, &n, NULL, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_hf_generate: the logits of step 0 hold nan"), "%s",
            dt_last_error());
  dt_hf_model_destroy(m);
}

/* Token id 0 is a stop token with use_stop_token (0 alone was "none", so id 0 could never end
 * generation): sampling with seed 2 at temperature 2 draws 0 (checked on the run without a stop
 * token), and the run with stop_token 0 ends right after it, the same ids up to there. */
Test(hf_model_errors, token_id_0_is_a_stop_token_with_use_stop_token) {
  SKIP_WITHOUT_FIXTURES();
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(HF "/llama_tiny", NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  int64_t prompt[3] = {1, 5, 7}, full[16], out[16], n_full = 0, n = 0;
  dt_hf_sampling s = {.temperature = 2.0, .seed = 2};
  cr_assert_eq(dt_hf_generate(m, prompt, 3, 12, &s, full, &n_full, NULL, NULL), DT_OK, "%s",
               dt_last_error());
  int64_t first_zero = -1;
  for (int64_t i = 3; i < n_full && first_zero < 0; i++)
    if (full[i] == 0) first_zero = i;
  cr_assert_geq(first_zero, 3, "the fixture's sampled run no longer draws id 0: pick another seed");
  s.stop_token = 0;
  s.use_stop_token = true;
  cr_assert_eq(dt_hf_generate(m, prompt, 3, 12, &s, out, &n, NULL, NULL), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(n, first_zero + 1, "stopped after %lld ids, expected %lld", (long long)n,
               (long long)(first_zero + 1));
  for (int64_t i = 0; i < n; i++) cr_assert_eq(out[i], full[i]);
  dt_hf_model_destroy(m);
}

/* A bos_token_id no token can be (at or past vocab_size) is refused at load, like eos_token_id
 * (it loaded silently); the last id loads. */
Test(hf_model_errors, bos_token_id_outside_the_vocabulary_is_refused) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir);
  const char *bad[] = {"256", "99999", "4000000000000000"};
  for (int i = 0; i < 3; i++) {
    char extra[128], value[48];
    snprintf(extra, sizeof extra, "\"num_attention_heads\": 4, \"bos_token_id\": %s", bad[i]);
    write_llama_config(dir, extra);
    snprintf(value, sizeof value, "\"bos_token_id\" is %s", bad[i]);
    expect_load_error(dir, DT_ERR_INVALID, value, "vocab_size 256");
  }
  write_llama_config(dir, "\"num_attention_heads\": 4, \"bos_token_id\": 255");
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_hf_model_config(m)->bos_token_id, 255);
  dt_hf_model_destroy(m);
  remove_dir(dir);
}

/* An eos_token_id no token can be (at or past vocab_size), alone or in a list, is refused at
 * load with a message naming eos_token_id, the value and vocab_size; the last id loads. */
Test(hf_model_errors, eos_token_id_outside_the_vocabulary_is_refused) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir);
  const char *bad[] = {"256", "[2, 256]", "[99999]", "4000000000000000"};
  const char *value[] = {"is 256", "[1] is 256", "[0] is 99999", "is 4000000000000000"};
  for (int i = 0; i < 4; i++) {
    char extra[128];
    snprintf(extra, sizeof extra, "\"num_attention_heads\": 4, \"eos_token_id\": %s", bad[i]);
    write_llama_config(dir, extra);
    expect_load_error(dir, DT_ERR_INVALID, "\"eos_token_id\"", value[i]);
    cr_assert(strstr(dt_last_error(), "vocab_size 256"), "%s", dt_last_error());
  }
  write_llama_config(dir, "\"num_attention_heads\": 4, \"eos_token_id\": [255, 0]");
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_hf_model_config(m)->n_eos_token_ids, 2);
  dt_hf_model_destroy(m);
  remove_dir(dir);
}

/* sampling.stop_token: -1 means none, and 0 too without use_stop_token; any other negative or an
 * id past the vocabulary is refused, naming the field and the value, and so is use_stop_token
 * with -1. A stop token and use_eos together stop at the first of either, checked against the
 * whole greedy sequence. */
Test(hf_model_errors, stop_token_outside_the_vocabulary_is_refused) {
  SKIP_WITHOUT_FIXTURES();
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(HF "/llama_tiny", NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  int64_t prompt[3] = {1, 5, 7}, full[16], out[16], n_full = 0, n = 0;
  cr_assert_eq(dt_hf_generate(m, prompt, 3, 12, NULL, full, &n_full, NULL, NULL), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(n_full, 15);
  const int64_t bad[] = {-7, -2, 256, 1000, INT64_MIN, INT64_MAX};
  for (int i = 0; i < 6; i++) {
    dt_hf_sampling s = {.stop_token = bad[i]};
    n = -5;
    cr_assert_eq(dt_hf_generate(m, prompt, 3, 4, &s, out, &n, NULL, NULL), DT_ERR_INVALID,
                 "stop_token %lld", (long long)bad[i]);
    char want[48];
    snprintf(want, sizeof want, "stop_token is %lld", (long long)bad[i]);
    cr_assert(strstr(dt_last_error(), want), "%s", dt_last_error());
    cr_assert_eq(n, -5, "nothing written on a refusal");
  }
  for (int64_t none = -1; none <= 0; none++) {
    dt_hf_sampling s = {.stop_token = none};
    cr_assert_eq(dt_hf_generate(m, prompt, 3, 12, &s, out, &n, NULL, NULL), DT_OK, "%s",
                 dt_last_error());
    cr_assert_eq(n, n_full, "stop_token %lld: none", (long long)none);
  }
  dt_hf_sampling unset = {.stop_token = -1, .use_stop_token = true};
  n = -5;
  cr_assert_eq(dt_hf_generate(m, prompt, 3, 4, &unset, out, &n, NULL, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "use_stop_token") && strstr(dt_last_error(), "is -1"), "%s",
            dt_last_error());
  cr_assert_eq(n, -5, "nothing written on a refusal");
  /* Stop at the 6th generated id, with use_eos on too (the fixture's eos is 2). */
  dt_hf_sampling s = {.stop_token = full[3 + 5], .use_eos = true};
  cr_assert_gt(s.stop_token, 0, "the fixture's 6th greedy id is a usable stop token");
  int64_t expected = n_full;
  for (int64_t i = 3; i < n_full; i++) {
    if (full[i] == s.stop_token || full[i] == 2) {
      expected = i + 1;
      break;
    }
  }
  cr_assert_eq(dt_hf_generate(m, prompt, 3, 12, &s, out, &n, NULL, NULL), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(n, expected, "stopped after %lld ids, expected %lld", (long long)n,
               (long long)expected);
  for (int64_t i = 0; i < n; i++) cr_assert_eq(out[i], full[i]);
  dt_hf_model_destroy(m);
}
