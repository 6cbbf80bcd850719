/*
 * Hugging Face folders read as transformers reads them, or refused (issue 35 items 6, 8, 9,
 * 10): a 1.4M-entry index looked up through its hash table (the right file for every tensor);
 * a key twice in config.json or the index, a UTF-8 BOM and trailing garbage refused naming the
 * file (and the key); rope_scaling fields and norm epsilons that make NaN logits refused at
 * load naming the field; a 126-layer config loads (the 113-layer cap is gone) and one asking
 * for more layers than the checkpoint holds is refused naming the field; strings of the files
 * escaped in messages; an empty batch's loss refused. The model files come from
 * ../shared/fixtures/hf, linked in place.
 */
#include <criterion/criterion.h>

#include "fixture_main.h" /* a run whose cases skipped for want of fixtures says so */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/text_escape.h"
#include "dtensor/dtensor.h"
#include "fs_helpers.h"

#define HF DT_FIXTURES_DIR "/hf"
#define LLAMA HF "/llama_tiny"

static bool hf_present(void) { return access(HF "/expected.json", R_OK) == 0; }

#define SKIP_WITHOUT_FIXTURES()                                                                    \
  do {                                                                                             \
    if (!hf_present()) cr_skip_test("the hf fixtures are absent (%s)", HF);                        \
  } while (0)

static void write_file(const char *dir, const char *name, const char *text, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(text, 1, n, f), n);
  cr_assert_eq(fclose(f), 0);
}

static void write_text(const char *dir, const char *name, const char *text) {
  write_file(dir, name, text, strlen(text));
}

/* The fixture's config.json as text. */
static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

/* A fresh directory: the tiny Llama's weights linked, its config.json copied (or not). */
static void llama_dir(char *dir, size_t size, bool config) {
  snprintf(dir, size, "/tmp/dt_hf_strict_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  cr_assert_eq(symlink(LLAMA "/model.safetensors", path), 0);
  if (config) write_text(dir, "config.json", read_all(LLAMA "/config.json"));
}

static void remove_dir(const char *dir) {
  cr_assert_eq(fs_remove_tree(dir), 0, "removing %s: %s", dir, strerror(errno));
}

static void expect_load_error(const char *dir, const char *w1, const char *w2) {
  dt_hf_model *m = NULL;
  dt_status st = dt_hf_model_load(dir, NULL, NULL, &m);
  cr_assert_eq(st, DT_ERR_INVALID, "status %s: %s", dt_status_string(st), dt_last_error());
  cr_assert_null(m);
  cr_assert(strstr(dt_last_error(), w1), "message lacks \"%s\": %s", w1, dt_last_error());
  if (w2) cr_assert(strstr(dt_last_error(), w2), "message lacks \"%s\": %s", w2, dt_last_error());
}

/* config.json: the fixture's text with `edit` applied: the first `from` replaced by `to`. */
static void write_config_edited(const char *dir, const char *from, const char *to) {
  const char *text = read_all(LLAMA "/config.json");
  const char *at = strstr(text, from);
  cr_assert_not_null(at, "the fixture's config.json lacks %s", from);
  static char out[1 << 16];
  snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  write_text(dir, "config.json", out);
}

static void expect_same_params(dt_hf_model *a, dt_hf_model *b) {
  cr_assert_eq(dt_hf_model_param_count(a), dt_hf_model_param_count(b));
  for (int i = 0; i < dt_hf_model_param_count(a); i++) {
    dt_tensor *x = dt_hf_model_param(a, i, NULL), *y = dt_hf_model_param(b, i, NULL);
    cr_assert_eq(dt_tensor_numel(x), dt_tensor_numel(y));
    cr_assert_eq(memcmp(dt_tensor_data(x), dt_tensor_data(y), (size_t)dt_tensor_numel(x) * 4), 0,
                 "parameter %d differs", i);
  }
}

/* 1.4M entries for tensors no model has, the fixture's own spread among them (one in the
 * middle, the rest at the end, each to model.safetensors): every parameter loads the same as
 * the unsharded fixture. Then one real tensor mapped to a missing file is reported with that
 * file: the lookup finds the entry of that tensor, not another. */
Test(hf_strict_load, a_large_index_maps_every_tensor_to_its_file, .timeout = 120) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir, true);
  dt_safetensors *f = NULL;
  cr_assert_eq(dt_safetensors_open(LLAMA "/model.safetensors", &f), DT_OK, "%s", dt_last_error());
  int n_real = dt_safetensors_count(f);
  const size_t junk = 1400000;
  size_t cap = junk * 40 + 4096;
  char *text = malloc(cap);
  cr_assert_not_null(text);
  for (int pass = 0; pass < 2; pass++) {
    size_t used =
        (size_t)snprintf(text, cap, "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {");
    for (size_t j = 0; j < junk; j++) {
      used += (size_t)snprintf(text + used, cap - used, "\"j%zu\":\"s%zu.safetensors\",", j, j % 7);
      if (j == junk / 2) {
        dt_safetensors_entry_info e;
        cr_assert_eq(dt_safetensors_entry(f, 0, &e), DT_OK);
        used += (size_t)snprintf(text + used, cap - used, "\"%s\":\"model.safetensors\",", e.name);
      }
    }
    for (int i = 1; i < n_real; i++) {
      dt_safetensors_entry_info e;
      cr_assert_eq(dt_safetensors_entry(f, i, &e), DT_OK);
      /* Second pass: the last real tensor's file does not exist. */
      const char *file =
          pass == 1 && i == n_real - 1 ? "missing-shard.safetensors" : "model.safetensors";
      used += (size_t)snprintf(text + used, cap - used, "%s\"%s\":\"%s\"", i > 1 ? "," : "", e.name,
                               file);
    }
    used += (size_t)snprintf(text + used, cap - used, "}}\n");
    cr_assert_lt(used, cap);
    write_file(dir, "model.safetensors.index.json", text, used);
    dt_hf_model *m = NULL, *ref = NULL;
    dt_status st = dt_hf_model_load(dir, NULL, NULL, &m);
    if (pass == 0) {
      cr_assert_eq(st, DT_OK, "%s", dt_last_error());
      cr_assert_eq(dt_hf_model_load(LLAMA, NULL, NULL, &ref), DT_OK, "%s", dt_last_error());
      expect_same_params(m, ref);
      dt_hf_model_destroy(ref);
      dt_hf_model_destroy(m);
    } else {
      cr_assert_eq(st, DT_ERR_IO, "%s: %s", dt_status_string(st), dt_last_error());
      cr_assert(strstr(dt_last_error(), "missing-shard.safetensors"), "%s", dt_last_error());
    }
  }
  free(text);
  dt_safetensors_destroy(f);
  remove_dir(dir);
}

/* transformers takes the last of a duplicated key (json.load): cJSON took the first. */
Test(hf_strict_load, duplicate_keys_are_refused_naming_the_key_and_file) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir, false);
  write_config_edited(dir, "\"vocab_size\"", "\"vocab_size\": 999999, \"vocab_size\"");
  expect_load_error(dir, "config.json", "key \"vocab_size\" appears twice");
  /* In a nested object, and spelled with an escape the second time. */
  write_config_edited(dir, "\"vocab_size\"",
                      "\"rope_scaling\": {\"rope_type\": \"default\", \"r\\u006fpe_type\": "
                      "\"llama3\"}, \"vocab_size\"");
  expect_load_error(dir, "config.json", "key \"rope_type\" appears twice");
  /* Duplicate keys of different objects are fine. */
  write_config_edited(dir, "\"vocab_size\"",
                      "\"a\": {\"x\": 1}, \"b\": {\"x\": 2}, \"vocab_size\"");
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  dt_hf_model_destroy(m);
  /* The index: a tensor twice (the second to another file), and weight_map twice. */
  write_text(dir, "config.json", read_all(LLAMA "/config.json"));
  write_text(dir, "model.safetensors.index.json",
             "{\"weight_map\": {\"model.norm.weight\": \"model.safetensors\", "
             "\"model.norm.weight\": \"other.safetensors\"}}");
  expect_load_error(dir, "model.safetensors.index.json", "key \"model.norm.weight\" appears twice");
  write_text(dir, "model.safetensors.index.json",
             "{\"weight_map\": {}, \"weight_map\": {\"model.norm.weight\": \"x.safetensors\"}}");
  expect_load_error(dir, "model.safetensors.index.json", "key \"weight_map\" appears twice");
  remove_dir(dir);
}

Test(hf_strict_load, a_bom_and_trailing_garbage_are_refused_naming_the_file) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir, false);
  const char *config = read_all(LLAMA "/config.json");
  static char text[1 << 16];
  snprintf(text, sizeof text, "\xef\xbb\xbf%s", config);
  write_text(dir, "config.json", text);
  expect_load_error(dir, "config.json", "byte order mark");
  const char *tails[] = {"x", "{}", "}", "\"vocab_size\": 999999"};
  for (int i = 0; i < 4; i++) {
    snprintf(text, sizeof text, "%s%s", config, tails[i]);
    write_text(dir, "config.json", text);
    expect_load_error(dir, "config.json", "trailing characters");
  }
  /* White space after the value is fine. */
  snprintf(text, sizeof text, "%s \n\t\r\n", config);
  write_text(dir, "config.json", text);
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  dt_hf_model_destroy(m);
  write_text(dir, "model.safetensors.index.json", "\xef\xbb\xbf{\"weight_map\": {}}");
  expect_load_error(dir, "model.safetensors.index.json", "byte order mark");
  write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {}} trailing");
  expect_load_error(dir, "model.safetensors.index.json", "trailing characters");
  remove_dir(dir);
}

/* A llama3 factor of 1e-44 (a float32 denormal) loaded and every generation failed with NaN
 * logits; now each field is checked at load, named, and so is a combination that overflows. */
Test(hf_strict_load, rope_scaling_and_norm_eps_that_make_nan_are_refused_by_name) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir, false);
  const char *fields[][2] = {
      {"\"factor\": 1e-44, \"low_freq_factor\": 1, \"high_freq_factor\": 4",
       "\"rope_parameters.factor\" 1e-44"},
      {"\"factor\": 8, \"low_freq_factor\": -1, \"high_freq_factor\": 4",
       "\"rope_parameters.low_freq_factor\" -1"},
      {"\"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 1e39",
       "\"rope_parameters.high_freq_factor\" 1e+39"},
      {"\"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 4, "
       "\"original_max_position_embeddings\": 0",
       "original_max_position_embeddings"},
      /* Each in range, the angles at the last position overflow float32. */
      {"\"factor\": 1.2e-38, \"low_freq_factor\": 1, \"high_freq_factor\": 4", "rotary frequency"},
  };
  for (int i = 0; i < 5; i++) {
    char scaling[400];
    snprintf(scaling, sizeof scaling, "\"rope_type\": \"llama3\", %s%s", fields[i][0],
             strstr(fields[i][0], "original") ? "" : ", \"original_max_position_embeddings\": 64");
    write_config_edited(dir, "\"rope_type\": \"default\"", scaling);
    expect_load_error(dir, "config.json", fields[i][1]);
  }
  write_config_edited(dir, "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 0");
  expect_load_error(dir, "config.json", "\"rms_norm_eps\" 0 must be > 0");
  write_config_edited(dir, "\"rope_theta\": 10000.0", "\"rope_theta\": 1e39");
  expect_load_error(dir, "config.json", "\"rope_theta\"");
  /* Sane llama3 values load and generate. */
  write_config_edited(dir, "\"rope_type\": \"default\"",
                      "\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, "
                      "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 64");
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  int64_t prompt[2] = {1, 5}, out[6], n = 0;
  cr_assert_eq(dt_hf_generate(m, prompt, 2, 3, NULL, out, &n, NULL, NULL), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(n, 5);
  dt_hf_model_destroy(m);
  remove_dir(dir);
}

/* A Llama of `layers` layers of width 8, every weight 0.01 (biases none, embeddings tied). */
static void write_deep_llama(const char *dir, int layers) {
  char config[1024];
  snprintf(config, sizeof config,
           "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 8, "
           "\"intermediate_size\": 8, \"num_hidden_layers\": %d, \"num_attention_heads\": 2, "
           "\"num_key_value_heads\": 2, \"vocab_size\": 16, \"max_position_embeddings\": 32, "
           "\"tie_word_embeddings\": true}",
           layers);
  write_text(dir, "config.json", config);
  int n = 9 * layers + 2;
  char **names = calloc((size_t)n, sizeof *names);
  dt_tensor **tensors = calloc((size_t)n, sizeof *tensors);
  cr_assert(names && tensors);
  float data[128];
  for (int i = 0; i < 128; i++) data[i] = 0.01f;
  static const char *const per_layer[9] = {
      "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
      "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
      "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight"};
  int k = 0;
  for (int l = 0; l < layers; l++) {
    for (int j = 0; j < 9; j++, k++) {
      names[k] = malloc(96);
      snprintf(names[k], 96, "model.layers.%d.%s", l, per_layer[j]);
      bool norm = j == 0 || j == 5;
      int64_t shape[2] = {8, 8};
      cr_assert_eq(dt_from_data(data, norm ? 1 : 2, shape, DT_F32, &tensors[k]), DT_OK);
    }
  }
  names[k] = strdup("model.norm.weight");
  cr_assert_eq(dt_from_data(data, 1, (int64_t[]){8}, DT_F32, &tensors[k++]), DT_OK);
  names[k] = strdup("model.embed_tokens.weight");
  cr_assert_eq(dt_from_data(data, 2, (int64_t[]){16, 8}, DT_F32, &tensors[k++]), DT_OK);
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  cr_assert_eq(dt_safetensors_save(path, n, (const char *const *)names, tensors, 0, NULL, NULL),
               DT_OK, "%s", dt_last_error());
  for (int i = 0; i < n; i++) {
    free(names[i]);
    dt_tensor_release(tensors[i]);
  }
  free(names);
  free(tensors);
}

/* Llama 3.1 405B has 126 layers: they load (a cap refused more than 113). A config asking for
 * more layers than its checkpoint holds tensors for is refused naming the file and field. */
Test(hf_strict_load, a_126_layer_model_loads_and_too_many_layers_are_refused_by_field) {
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/dt_hf_strict_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  write_deep_llama(dir, 126);
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_hf_model_config(m)->num_layers, 126);
  cr_assert_eq(dt_hf_model_param_count(m), 126 * 9 + 2);
  int64_t prompt[2] = {1, 2}, out[4], n = 0;
  cr_assert_eq(dt_hf_generate(m, prompt, 2, 2, NULL, out, &n, NULL, NULL), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(n, 4);
  dt_hf_model_destroy(m);
  /* The same checkpoint under a config of 10^9 layers: refused before any table is made. */
  write_text(dir, "config.json",
             "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 8, "
             "\"intermediate_size\": 8, \"num_hidden_layers\": 1000000000, "
             "\"num_attention_heads\": 2, \"vocab_size\": 16}");
  expect_load_error(dir, "config.json: \"num_hidden_layers\" 1000000000", "holds 1136");
  remove_dir(dir);
}

/* Config values and index file names reach messages escaped: ESC]0;title and CR/LF shown,
 * never obeyed. */
Test(hf_strict_load, strings_from_the_files_are_escaped_in_messages) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir, false);
  write_config_edited(dir, "\"hidden_act\": \"silu\"",
                      "\"hidden_act\": \"\\u001b]0;owned\\u0007\\r\\nFAKE LINE\"");
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_ERR_UNSUPPORTED);
  const char *e = dt_last_error();
  cr_assert(strstr(e, "hidden_act \"\\x1b]0;owned\\x07\\x0d\\x0aFAKE LINE\""), "%s", e);
  cr_assert(!strchr(e, '\x1b') && !strchr(e, '\n') && !strchr(e, '\r'), "raw control: %s", e);
  write_text(dir, "config.json", read_all(LLAMA "/config.json"));
  write_text(dir, "model.safetensors.index.json",
             "{\"weight_map\": {\"model.norm.weight\": \"\\u001b[2Jx.safetensors\"}}");
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_ERR_INVALID);
  e = dt_last_error();
  cr_assert(strstr(e, "\"\\x1b[2Jx.safetensors\"") && !strchr(e, '\x1b'), "%s", e);
  remove_dir(dir);
}

Test(hf_strict_load, the_escape_helper_shows_every_control_and_cuts_whole_characters) {
  char buf[64];
  cr_assert_str_eq(dt__escape_text(buf, sizeof buf, "a\x1b[2J\\b\r\n\x7f"),
                   "a\\x1b[2J\\\\b\\x0d\\x0a\\x7f");
  /* C1 (U+009B, CSI), a stray continuation byte, an overlong '/', valid UTF-8. */
  cr_assert_str_eq(dt__escape_text(buf, sizeof buf, "\xc2\x9b|\x80|\xc0\xaf|\xc3\xa9"),
                   "\\u009b|\\x80|\\xc0\\xaf|\xc3\xa9");
  /* Too long: cut at a whole character with "..."; exactly fitting: whole. */
  cr_assert_str_eq(dt__escape_text(buf, 8, "abcdefg"), "abcdefg");
  cr_assert_str_eq(dt__escape_text(buf, 8, "abcdefgh"), "abcd...");
  cr_assert_str_eq(dt__escape_text(buf, 8,
                                   "ab\x1b"
                                   "cdefgh"),
                   "ab...");
}

/* The mean over no predictions is NaN: dtensor finetune printed "loss -nan" and saved. */
Test(hf_strict_load, the_loss_of_an_empty_batch_is_refused) {
  SKIP_WITHOUT_FIXTURES();
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(LLAMA, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  dt_tensor *ids = NULL, *loss = NULL;
  cr_assert_eq(dt_zeros(2, (int64_t[]){0, 8}, DT_I64, &ids), DT_OK);
  cr_assert_eq(dt_hf_model_loss(m, ids, &loss), DT_ERR_INVALID);
  cr_assert_null(loss);
  cr_assert(strstr(dt_last_error(), "dt_hf_model_loss: input_ids [0, 8] has no rows"), "%s",
            dt_last_error());
  dt_tensor_release(ids);
  /* One row still works. */
  cr_assert_eq(dt_zeros(2, (int64_t[]){1, 8}, DT_I64, &ids), DT_OK);
  cr_assert_eq(dt_hf_model_loss(m, ids, &loss), DT_OK, "%s", dt_last_error());
  double v = 0;
  dt_tensor *d = NULL;
  cr_assert_eq(dt_detach(loss, &d), DT_OK);
  cr_assert_eq(dt_tensor_to_doubles(d, &v, 1), DT_OK);
  cr_assert(isfinite(v) && v > 0, "loss %g", v);
  dt_tensor_release(d);
  dt_tensor_release(loss);
  dt_tensor_release(ids);
  dt_hf_model_destroy(m);
}

/* A string with \u0000 in config.json was cut there by cJSON and accepted ("silu\u0000x" read
 * as "silu"; Python keeps the whole and transformers refuses it): refused at its byte, naming
 * the key. So is a key with one, and a tensor or file name of the index with one. */
Test(hf_strict_load, a_string_with_u0000_is_refused_naming_the_key) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir, false);
  const char *text = read_all(LLAMA "/config.json");
  char byte[32];
  snprintf(byte, sizeof byte, "byte %d: ", (int)(strstr(text, "\"silu\"") - text) + 5);
  write_config_edited(dir, "\"silu\"", "\"silu\\u0000x\"");
  expect_load_error(dir, "config.json: ", "the value of \"hidden_act\" holds \\u0000");
  cr_assert(strstr(dt_last_error(), byte), "message lacks \"%s\": %s", byte, dt_last_error());
  write_config_edited(dir, "\"pad_token_id\"", "\"pad\\u0000token_id\"");
  expect_load_error(dir, "the key \"pad\xef\xbf\xbdtoken_id\" holds \\u0000", NULL);
  write_config_edited(dir, "\"LlamaForCausalLM\"", "\"LlamaForCausalLM\\u0000\"");
  expect_load_error(dir, "the value of \"architectures\" holds \\u0000", NULL);
  write_config_edited(dir, "\"default\"", "\"default\\u0000\"");
  expect_load_error(dir, "the value of \"rope_type\" holds \\u0000", NULL);
  /* The index: a file name cut at \u0000 would name another file. */
  write_text(dir, "config.json", read_all(LLAMA "/config.json"));
  write_text(dir, "model.safetensors.index.json",
             "{\"weight_map\": {\"model.norm.weight\": \"model.safetensors\\u0000.x\"}}");
  expect_load_error(dir, "model.safetensors.index.json: byte ",
                    "the value of \"model.norm.weight\" holds \\u0000");
  remove_dir(dir);
}

/* A lone surrogate (\ud800 alone, or a low half \udc00 alone) made cJSON refuse config.json as
 * "not a JSON object", saying neither where nor why: refused at its byte, naming the key. A
 * pair (U+1F600) is a character and loads. */
Test(hf_strict_load, a_lone_surrogate_is_refused_at_its_byte) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir, false);
  static const char *const lone[][2] = {{"\"\\ud800\"", "\\ud800"},
                                        {"\"\\udc00silu\"", "\\udc00"},
                                        {"\"\\ud800silu\"", "\\ud800"},
                                        {"\"silu\\ud83d\"", "\\ud83d"},
                                        {"\"\\ud800\\u0041\"", "\\ud800"}};
  for (int i = 0; i < 5; i++) {
    write_config_edited(dir, "\"silu\"", lone[i][0]);
    char what[96];
    snprintf(what, sizeof what, "the value of \"hidden_act\" holds a lone surrogate %s",
             lone[i][1]);
    expect_load_error(dir, "config.json: byte ", what);
    cr_assert(!strstr(dt_last_error(), "not a JSON object"), "%s", dt_last_error());
  }
  write_config_edited(dir, "\"pad_token_id\"", "\"\\udfff\"");
  expect_load_error(dir, "config.json: byte ", "the key \"\xef\xbf\xbd\" holds a lone surrogate");
  write_config_edited(dir, "\"dtype\": \"float32\"", "\"note\": \"\\ud83d\\ude00\"");
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  dt_hf_model_destroy(m);
  remove_dir(dir);
}

/* Python's json reads 2e0, 2.0 and 256.0000000000000001 as floats, which transformers does not
 * take for an int field; they loaded here as the integers 2 and 256. Each is refused naming
 * the field and the number as written; integers written as integers (-0 too, an int to
 * Python) and float fields in exponent form still load. */
Test(hf_strict_load, a_number_written_as_a_float_is_refused_for_an_integer_field) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir, false);
  static const char *const bad[][3] = {
      {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 2e0", "\"num_hidden_layers\""},
      {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 2.0", "\"num_hidden_layers\""},
      {"\"vocab_size\": 256", "\"vocab_size\": 256.0000000000000001", "\"vocab_size\""},
      {"\"head_dim\": 16", "\"head_dim\": 1.6E1", "\"head_dim\""},
      {"\"eos_token_id\": 2", "\"eos_token_id\": [1, 2.0]", "\"eos_token_id\""},
      {"\"bos_token_id\": 1", "\"bos_token_id\": 1e0", "\"bos_token_id\""}};
  for (int i = 0; i < 6; i++) {
    write_config_edited(dir, bad[i][0], bad[i][1]);
    char what[160];
    snprintf(what, sizeof what, "%s must be an integer, written as one: %s is a float", bad[i][2],
             strchr(bad[i][1], ':') + 2);
    if (i == 4)
      snprintf(what, sizeof what,
               "\"eos_token_id\" must be an integer, written as "
               "one: 2.0 is a float");
    expect_load_error(dir, "config.json: ", what);
  }
  write_config_edited(dir, "\"bos_token_id\": 1", "\"bos_token_id\": -0");
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  dt_hf_model_destroy(m);
  write_config_edited(dir, "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 1E-5");
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  dt_hf_model_destroy(m);
  remove_dir(dir);
}

/* A boolean field is true, false or null: 1, "true" and "false" are refused by name (they mean
 * other things to transformers than to a default). */
Test(hf_strict_load, a_boolean_field_written_otherwise_is_refused_by_name) {
  SKIP_WITHOUT_FIXTURES();
  char dir[64];
  llama_dir(dir, sizeof dir, false);
  static const char *const bad[] = {"1", "\"true\"", "\"false\"", "[]"};
  for (int i = 0; i < 4; i++) {
    char to[64];
    snprintf(to, sizeof to, "\"tie_word_embeddings\": %s", bad[i]);
    write_config_edited(dir, "\"tie_word_embeddings\": false", to);
    expect_load_error(dir, "config.json: ", "tie_word_embeddings must be true, false or null");
  }
  write_config_edited(dir, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": null");
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  dt_hf_model_destroy(m);
  remove_dir(dir);
}
