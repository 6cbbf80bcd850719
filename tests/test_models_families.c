/*
 * The model families of issue 38 (src/models/qwen3.c, mistral.c, mixtral.c): the tiny
 * Qwen3ForCausalLM, MistralForCausalLM, MixtralForCausalLM (sharded checkpoint) and
 * Qwen3MoeForCausalLM of ../shared/fixtures/hf (written by transformers 5.24) loaded on 1 rank,
 * TP 2, FSDP 2 and FSDP 2 x TP 2, checked against transformers' logits, greedy generation (it
 * runs past Mistral's 8-token window, so the windowed KV cache is exercised) and five
 * fine-tuning losses; saved on TP 2 in Hugging Face's layout and reloaded on 1 rank with the
 * same logits; bad configs refused by name.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"
#include "hf_fixture_checks.h"
#include "fixture_main.h"

static bool families_present(void) {
  FILE *f = fopen(HF "/expected_families.json", "r");
  if (f) fclose(f);
  return f != NULL;
}

#define SKIP_WITHOUT_FAMILIES()                                                                    \
  do {                                                                                             \
    if (!families_present()) cr_skip_test("the family fixtures are absent (%s)", HF);              \
  } while (0)

/* One configuration: the model, a mesh of dims (NULL names: one rank), the plan. */
typedef struct fam_case {
  const char *model;
  int ndim;
  int shape[2];
  const char *names[2];
  dt_hf_plan plan;
  char save_dir[256];          /* when set: saved there after the checks */
  double logits_rel, loss_rel; /* measured on rank 0 */
} fam_case;

static dt_status fam_rank(dt_comm *world, void *arg) {
  fam_case *c = arg;
  dt_mesh *mesh = NULL;
  dt_hf_model *m = NULL;
  char dir[256];
  snprintf(dir, sizeof dir, HF "/%s", c->model);
  if (world) RANK_OK(dt_mesh_create(world, c->ndim, c->shape, c->names, &mesh));
  RANK_OK(dt_hf_model_load(dir, mesh, world ? &c->plan : NULL, &m));
  double rel = 0, loss = 0;
  RANK_OK(check_logits_rel(m, c->model, &rel));
  RANK_OK(check_greedy(m, c->model));
  if (c->save_dir[0]) {
    RANK_OK(dt_hf_model_save(m, c->save_dir));
  } else {
    RANK_OK(check_finetune_rel(m, c->model, &loss));
  }
  if (!world || dt_comm_rank(world) == 0) c->logits_rel = rel, c->loss_rel = loss;
  dt_hf_model_destroy(m);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void run_case(fam_case c, const char *layout) {
  SKIP_WITHOUT_FAMILIES();
  if (c.ndim == 0) {
    cr_assert_eq(fam_rank(NULL, &c), DT_OK, "%s", dt_last_error());
  } else {
    SPAWN_OK(c.ndim == 1 ? c.shape[0] : c.shape[0] * c.shape[1], fam_rank, &c);
  }
  /* The measured differences, for docs/models.md (threads share c: rank 0 wrote them). */
  fprintf(stderr, "%s %s: logits %.3g of the largest, losses %.3g relative\n", c.model, layout,
          c.logits_rel, c.loss_rel);
}

#define ONE .ndim = 0
#define TP2 .ndim = 1, .shape = {2}, .names = {"tp"}, .plan = {.tp = "tp"}
#define TP2_SP                                                                                     \
  .ndim = 1, .shape = {2}, .names = {"tp"}, .plan = {.tp = "tp", .sequence_parallel = true}
#define FSDP2 .ndim = 1, .shape = {2}, .names = {"dp"}, .plan = {.fsdp = "dp"}
#define FSDP2_TP2                                                                                  \
  .ndim = 2, .shape = {2, 2}, .names = {"dp", "tp"}, .plan = {.tp = "tp", .fsdp = "dp"}

#define FAMILY_TESTS(family, dir)                                                                  \
  Test(families, family##_one_rank, .timeout = 120) { run_case((fam_case){dir, ONE}, "1 rank"); }  \
  Test(families, family##_tp2, .timeout = 120) { run_case((fam_case){dir, TP2}, "TP 2"); }         \
  Test(families, family##_fsdp2, .timeout = 120) { run_case((fam_case){dir, FSDP2}, "FSDP 2"); }   \
  Test(families, family##_fsdp2_tp2, .timeout = 180) {                                             \
    run_case((fam_case){dir, FSDP2_TP2}, "FSDP 2 x TP 2");                                         \
  }

FAMILY_TESTS(qwen3, "qwen3_tiny")
FAMILY_TESTS(mistral, "mistral_tiny")
FAMILY_TESTS(mixtral, "mixtral_tiny")
FAMILY_TESTS(qwen3_moe, "qwen3_moe_tiny")

/* Megatron's sequence parallelism: the residual stream sharded over the sequence (the MoE
 * families gather it whole around the experts). */
Test(families, qwen3_tp2_sequence_parallel, .timeout = 120) {
  run_case((fam_case){"qwen3_tiny", TP2_SP}, "TP 2 + SP");
}
Test(families, mixtral_tp2_sequence_parallel, .timeout = 120) {
  run_case((fam_case){"mixtral_tiny", TP2_SP}, "TP 2 + SP");
}

static void remove_saved(const char *dir) {
  char path[512];
  const char *files[] = {"config.json", "model.safetensors"};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    remove(path);
  }
  remove(dir);
}

/* Saved on TP 2 in Hugging Face's layout (one model.safetensors, transformers' names), then
 * reloaded on 1 rank: transformers' logits, greedy ids and losses again. */
static void save_reload(const char *model) {
  SKIP_WITHOUT_FAMILIES();
  char base[64] = "/tmp/dt_families_XXXXXX";
  cr_assert_not_null(mkdtemp(base));
  fam_case tp = {model, TP2};
  snprintf(tp.save_dir, sizeof tp.save_dir, "%s/saved", base);
  SPAWN_OK(2, fam_rank, &tp);
  /* The reload reads the saved folder but compares with the fixture's io.safetensors. */
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(tp.save_dir, NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  const char *name = NULL;
  bool hf_names = true;
  for (int i = 0; i < dt_hf_model_param_count(m); i++) {
    dt_hf_model_param(m, i, &name);
    hf_names &= strncmp(name, "model.", 6) == 0 || strcmp(name, "lm_head.weight") == 0;
  }
  cr_assert(hf_names, "a saved tensor is not under transformers' names: %s", name);
  double rel = 1;
  cr_assert_eq(check_logits_rel(m, model, &rel), DT_OK, "%s", dt_last_error());
  cr_assert_eq(check_greedy(m, model), DT_OK, "%s", dt_last_error());
  cr_assert_eq(check_finetune(m, model), DT_OK, "%s", dt_last_error());
  fprintf(stderr, "%s saved on TP 2, reloaded: logits %.3g of the largest\n", model, rel);
  dt_hf_model_destroy(m);
  remove_saved(tp.save_dir);
  remove(base);
}

Test(families, qwen3_save_reload, .timeout = 120) { save_reload("qwen3_tiny"); }
Test(families, mistral_save_reload, .timeout = 120) { save_reload("mistral_tiny"); }
Test(families, mixtral_save_reload, .timeout = 120) { save_reload("mixtral_tiny"); }
Test(families, qwen3_moe_save_reload, .timeout = 120) { save_reload("qwen3_moe_tiny"); }

/* The loaded config: the family's facts read from config.json. */
Test(families, configs_read) {
  SKIP_WITHOUT_FAMILIES();
  dt_hf_model *m = NULL;
  cr_assert_eq(dt_hf_model_load(HF "/qwen3_tiny", NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  const dt_hf_config *c = dt_hf_model_config(m);
  cr_assert(c->arch == DT_HF_QWEN3 && c->qk_norm && c->head_dim == 32 && c->tie_word_embeddings &&
            c->rope_theta == 1e6 && c->sliding_window == 0);
  dt_hf_model_destroy(m);
  cr_assert_eq(dt_hf_model_load(HF "/mistral_tiny", NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  c = dt_hf_model_config(m);
  cr_assert(c->arch == DT_HF_MISTRAL && c->sliding_window == 8 && !c->qk_norm);
  dt_hf_model_destroy(m);
  cr_assert_eq(dt_hf_model_load(HF "/mixtral_tiny", NULL, NULL, &m), DT_OK, "%s", dt_last_error());
  c = dt_hf_model_config(m);
  cr_assert(c->arch == DT_HF_MIXTRAL && c->num_experts == 4 && c->num_experts_per_tok == 2 &&
            c->moe_intermediate_size == 96 && c->norm_topk_prob && c->sliding_window == 0);
  dt_hf_model_destroy(m);
  cr_assert_eq(dt_hf_model_load(HF "/qwen3_moe_tiny", NULL, NULL, &m), DT_OK, "%s",
               dt_last_error());
  c = dt_hf_model_config(m);
  cr_assert(c->arch == DT_HF_QWEN3_MOE && c->num_experts == 8 && c->moe_intermediate_size == 48 &&
            c->norm_topk_prob && c->qk_norm && c->head_dim == 16);
  dt_hf_model_destroy(m);
}

/* What is not built is refused naming config.json and the field, before any weight is read. */
static void refused(const char *config, dt_status want, const char *word) {
  char dir[64] = "/tmp/dt_families_cfg_XXXXXX", path[128];
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(config, f);
  fclose(f);
  dt_hf_model *m = NULL;
  dt_status st = dt_hf_model_load(dir, NULL, NULL, &m);
  cr_expect_eq(st, want, "%s: %s", dt_status_string(st), dt_last_error());
  cr_expect_null(m);
  cr_expect(strstr(dt_last_error(), "config.json") && strstr(dt_last_error(), word),
            "message lacks config.json or \"%s\": %s", word, dt_last_error());
  remove(path);
  remove(dir);
}

#define DENSE                                                                                      \
  "\"vocab_size\": 32, \"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": 1, " \
  "\"num_attention_heads\": 2, \"num_key_value_heads\": 1"

Test(families, refuses_what_is_not_built) {
  refused("{\"architectures\": [\"Qwen3ForCausalLM\"], " DENSE ", \"use_sliding_window\": true}",
          DT_ERR_UNSUPPORTED, "use_sliding_window");
  refused("{\"architectures\": [\"MixtralForCausalLM\"], " DENSE
          ", \"num_local_experts\": 4, \"num_experts_per_tok\": 5}",
          DT_ERR_INVALID, "num_experts_per_tok");
  refused("{\"architectures\": [\"MixtralForCausalLM\"], " DENSE "}", DT_ERR_INVALID,
          "num_local_experts");
  refused("{\"architectures\": [\"MixtralForCausalLM\"], " DENSE
          ", \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"router_jitter_noise\": 0.1}",
          DT_ERR_UNSUPPORTED, "router_jitter_noise");
  refused("{\"architectures\": [\"Qwen3MoeForCausalLM\"], " DENSE
          ", \"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 8, "
          "\"mlp_only_layers\": [0]}",
          DT_ERR_UNSUPPORTED, "mlp_only_layers");
  refused("{\"architectures\": [\"MistralForCausalLM\"], " DENSE ", \"sliding_window\": 0}",
          DT_ERR_INVALID, "sliding_window");
}
