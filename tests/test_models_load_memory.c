/*
 * Loading a model on a mesh allocates each rank's shards, not the whole model per rank: the
 * tree's parameters are zero-strided placeholders until the plans shard them, and a block is
 * whole (its initial weights) only while it is built. A counting allocator (dt_set_allocator)
 * measures the process's peak while 2 ranks load an 8-layer Llama of width 256 under FSDP 2
 * and under TP 2: at most 1.5 times the model's bytes (about 1.1 to 1.2 here; every rank
 * building the whole tree, without the placeholders, peaks at 2 and 3 times).
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"
#include "counting_alloc.h" /* live_bytes, peak_bytes, live_blocks */

#define LAYERS 8
#define D 256
#define I 512
#define V 64

/* The model's float32 bytes: per layer 2 norms, q/k/v/o [D, D], gate/up [I, D], down [D, I];
 * the embedding and the untied head [V, D]; the final norm. */
static const long long MODEL_BYTES =
    4LL * (LAYERS * (2 * D + 4 * D * D + 3 * I * D) + 2 * V * D + D);

static void write_model(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fprintf(f,
          "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": %d, "
          "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": 4, "
          "\"num_key_value_heads\": 4, \"vocab_size\": %d, \"max_position_embeddings\": 32, "
          "\"tie_word_embeddings\": false}",
          D, I, LAYERS, V);
  fclose(f);
  static const char *const per_layer[9] = {
      "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
      "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
      "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight"};
  static const int64_t shapes[9][2] = {{D, 0}, {D, D}, {D, D}, {D, D}, {D, D},
                                       {D, 0}, {I, D}, {I, D}, {D, I}};
  int n = 9 * LAYERS + 3, k = 0;
  char **names = calloc((size_t)n, sizeof *names);
  dt_tensor **tensors = calloc((size_t)n, sizeof *tensors);
  for (int l = 0; l < LAYERS; l++)
    for (int j = 0; j < 9; j++, k++) {
      names[k] = malloc(96);
      snprintf(names[k], 96, "model.layers.%d.%s", l, per_layer[j]);
      cr_assert_eq(dt_zeros(shapes[j][1] ? 2 : 1, shapes[j], DT_F32, &tensors[k]), DT_OK);
    }
  names[k] = strdup("model.norm.weight");
  cr_assert_eq(dt_zeros(1, (int64_t[]){D}, DT_F32, &tensors[k++]), DT_OK);
  names[k] = strdup("model.embed_tokens.weight");
  cr_assert_eq(dt_zeros(2, (int64_t[]){V, D}, DT_F32, &tensors[k++]), DT_OK);
  names[k] = strdup("lm_head.weight");
  cr_assert_eq(dt_zeros(2, (int64_t[]){V, D}, DT_F32, &tensors[k++]), DT_OK);
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

typedef struct load_case {
  char dir[64];
  dt_hf_plan plan;
  const char *dim;
} load_case;

static dt_status load_rank(dt_comm *world, void *arg) {
  const load_case *c = arg;
  dt_mesh *mesh = NULL;
  dt_hf_model *m = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, (const char *[]){c->dim}, &mesh));
  RANK_OK(dt_hf_model_load(c->dir, mesh, &c->plan, &m));
  RANK_OK(dt_comm_barrier(world));
  dt_hf_model_destroy(m);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void check_peak(dt_hf_plan plan, const char *dim) {
  load_case c = {.plan = plan, .dim = dim};
  snprintf(c.dir, sizeof c.dir, "/tmp/dt_load_memory_XXXXXX");
  cr_assert_not_null(mkdtemp(c.dir));
  write_model(c.dir);
  dt_allocator a = {count_alloc, count_free, NULL};
  dt_set_allocator(&a);
  atomic_store(&peak_bytes, atomic_load(&live_bytes));
  long long before = atomic_load(&live_bytes);
  SPAWN_OK(2, load_rank, &c);
  long long peak = atomic_load(&peak_bytes) - before;
  dt_set_allocator(NULL);
  char path[512];
  snprintf(path, sizeof path, "%s/config.json", c.dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/model.safetensors", c.dir);
  unlink(path);
  rmdir(c.dir);
  cr_assert(peak <= MODEL_BYTES * 3 / 2, "%s 2: the load's peak is %lld bytes, the model %lld", dim,
            peak, MODEL_BYTES);
}

Test(models_load_memory, fsdp2_allocates_shards_not_the_model_per_rank) {
  check_peak((dt_hf_plan){.fsdp = "dp"}, "dp");
}

Test(models_load_memory, tp2_allocates_shards_not_the_model_per_rank) {
  check_peak((dt_hf_plan){.tp = "tp"}, "tp");
}
