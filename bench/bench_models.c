/*
 * dtensor bench models: generation speed of a Hugging Face Llama (prefill and decode tokens/s)
 * on 1 rank and on 2 tensor-parallel ranks (threads), in the same run, alternating (1 rank,
 * TP 2, 1 rank, ...) so that drift in the machine's load hits both alike. Each rank's BLAS
 * runs one thread. A run is dt_hf_generate of --new greedy tokens after a prompt of --prompt
 * ids: prefill tokens/s = prompt / prefill time, decode tokens/s = (new - 1) / decode time (the
 * first new token comes from the prefill). Reports the median and min..max of --reps runs.
 *
 * The model: --model DIR (a Hugging Face directory), else a random Llama written to a
 * temporary directory by this suite: --size small (vocab 2048, hidden 256, 4 layers, 8 heads
 * over 4 kv heads of 32, intermediate 688) or tiny (vocab 256, hidden 64, 2 layers, 4 over 2,
 * intermediate 160). bench/peers/models.py runs the same directory with transformers.
 *
 * Options: --json, --model DIR, --size small|tiny, --prompt N (default 64), --new N
 * (default 32), --reps N (default 5), --keep (keep the written model, its path printed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_machine.h"
#include "bench_util.h"
#include "dtensor/dtensor.h"
#include "kernels/cpu/blas.h"
#include "tools.h"

#define MAX_REPS 32

typedef struct llama_size {
  const char *name;
  int64_t V, D, I, L, H, KV, hd;
} llama_size;

static const llama_size sizes[] = {{"small", 2048, 256, 688, 4, 8, 4, 32},
                                   {"tiny", 256, 64, 160, 2, 4, 2, 16}};

typedef struct models_bench {
  char dir[512];
  int64_t prompt, max_new;
  int reps;
  double prefill[2][MAX_REPS], decode[2][MAX_REPS]; /* tokens/s: [0] 1 rank, [1] TP 2 */
} models_bench;

/* One weight: random normal * scale (norm weights: 1 + 0.1 normal). */
static dt_status add_weight(dt_tensor **ts, const char **names, char (*store)[96], int *n,
                            const char *name, int64_t rows, int64_t cols, bool norm) {
  dt_tensor *r = NULL;
  int64_t shape[2] = {rows, cols};
  int nd = cols > 0 ? 2 : 1;
  dt_status st = dt_randn(nd, shape, DT_F32, (uint64_t)(*n + 1), &r);
  if (!st) st = norm ? dt_mul_scalar(r, 0.1, &ts[*n]) : dt_mul_scalar(r, 0.05, &ts[*n]);
  if (!st && norm) st = dt_add_scalar_(ts[*n], 1.0);
  dt_tensor_release(r);
  snprintf(store[*n], 96, "%s", name);
  names[*n] = store[*n];
  (*n)++;
  return st;
}

/* A random LlamaForCausalLM in dir: config.json and model.safetensors. */
static dt_status write_llama(const llama_size *z, const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return DT_ERR_IO;
  fprintf(f,
          "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
          "\"vocab_size\": %lld, \"hidden_size\": %lld, \"intermediate_size\": %lld, "
          "\"num_hidden_layers\": %lld, \"num_attention_heads\": %lld, "
          "\"num_key_value_heads\": %lld, \"head_dim\": %lld, \"max_position_embeddings\": 4096, "
          "\"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"hidden_act\": \"silu\", "
          "\"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": 2, "
          "\"torch_dtype\": \"float32\"}\n",
          (long long)z->V, (long long)z->D, (long long)z->I, (long long)z->L, (long long)z->H,
          (long long)z->KV, (long long)z->hd);
  fclose(f);
  int cap = 4 + 9 * (int)z->L, n = 0;
  dt_tensor **ts = calloc((size_t)cap, sizeof *ts);
  const char **names = calloc((size_t)cap, sizeof *names);
  char(*store)[96] = calloc((size_t)cap, sizeof *store);
  dt_status st = ts && names && store ? DT_OK : DT_ERR_NOMEM;
  char nm[96];
  int64_t Q = z->H * z->hd, K = z->KV * z->hd;
  if (!st) st = add_weight(ts, names, store, &n, "model.embed_tokens.weight", z->V, z->D, false);
  for (int64_t l = 0; l < z->L && !st; l++) {
    struct {
      const char *suffix;
      int64_t rows, cols;
      bool norm;
    } w[] = {{"input_layernorm.weight", z->D, 0, true},
             {"self_attn.q_proj.weight", Q, z->D, false},
             {"self_attn.k_proj.weight", K, z->D, false},
             {"self_attn.v_proj.weight", K, z->D, false},
             {"self_attn.o_proj.weight", z->D, Q, false},
             {"post_attention_layernorm.weight", z->D, 0, true},
             {"mlp.gate_proj.weight", z->I, z->D, false},
             {"mlp.up_proj.weight", z->I, z->D, false},
             {"mlp.down_proj.weight", z->D, z->I, false}};
    for (int k = 0; k < 9 && !st; k++) {
      snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, w[k].suffix);
      st = add_weight(ts, names, store, &n, nm, w[k].rows, w[k].cols, w[k].norm);
    }
  }
  if (!st) st = add_weight(ts, names, store, &n, "model.norm.weight", z->D, 0, true);
  if (!st) st = add_weight(ts, names, store, &n, "lm_head.weight", z->V, z->D, false);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  const char *keys[1] = {"format"}, *values[1] = {"pt"};
  if (!st) st = dt_safetensors_save(path, n, names, ts, 1, keys, values);
  for (int i = 0; i < n; i++) dt_tensor_release(ts[i]);
  free(ts), free(names), free(store);
  return st;
}

/* The prompt: ids 3, 10, 17, ... modulo the vocabulary. */
static void prompt_ids(int64_t V, int64_t n, int64_t *ids) {
  for (int64_t i = 0; i < n; i++) ids[i] = (3 + 7 * i) % V;
}

/* One generation: tokens/s of its prefill and decode. */
static dt_status generate_once(dt_hf_model *m, const models_bench *b, double *pf, double *dc) {
  int64_t V = dt_hf_model_config(m)->vocab_size;
  int64_t *ids = malloc(sizeof(int64_t) * (size_t)(b->prompt + b->max_new));
  if (!ids) return DT_ERR_NOMEM;
  prompt_ids(V, b->prompt, ids);
  int64_t n = 0;
  double prefill_s = 0, decode_s = 0;
  dt_status st =
      dt_hf_generate(m, ids, b->prompt, b->max_new, NULL, ids, &n, &prefill_s, &decode_s);
  free(ids);
  if (st) return st;
  *pf = (double)b->prompt / prefill_s;
  *dc = n - b->prompt > 1 ? (double)(n - b->prompt - 1) / decode_s : 0;
  return DT_OK;
}

/* Every rank of a 2-rank world: runs r: rank 0 alone on the 1-rank model (rank 1 waits at the
 * barrier), then both on the TP 2 model. */
static dt_status rank_main(dt_comm *world, void *arg) {
  models_bench *b = arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  dt_hf_model *single = NULL, *tp = NULL;
  dt_hf_plan plan = {.tp = "tp"};
  dt_status st = dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"tp"}, &mesh);
  if (!st && rank == 0) st = dt_hf_model_load(b->dir, NULL, NULL, &single);
  if (!st) st = dt_hf_model_load(b->dir, mesh, &plan, &tp);
  for (int r = -1; r < b->reps && !st; r++) { /* run -1 warms up */
    double pf = 0, dc = 0;
    st = dt_comm_barrier(world);
    if (!st && rank == 0) st = generate_once(single, b, &pf, &dc);
    if (!st && r >= 0 && rank == 0) b->prefill[0][r] = pf, b->decode[0][r] = dc;
    if (!st) st = dt_comm_barrier(world);
    if (!st) st = generate_once(tp, b, &pf, &dc);
    if (!st && r >= 0 && rank == 0) b->prefill[1][r] = pf, b->decode[1][r] = dc;
  }
  dt_hf_model_destroy(single);
  dt_hf_model_destroy(tp);
  dt_mesh_destroy(mesh);
  return st;
}

static int usage(void) {
  fprintf(stderr, "bench models: bad or incomplete option (see 'dtensor bench models --help')\n");
  return 2;
}

static void report(bool json, const models_bench *b, const char *model) {
  static const char *phase[2] = {"prefill", "decode"};
  for (int p = 0; p < 2; p++) {
    double s1[MAX_REPS], s2[MAX_REPS];
    memcpy(s1, p ? b->decode[0] : b->prefill[0], sizeof(double) * (size_t)b->reps);
    memcpy(s2, p ? b->decode[1] : b->prefill[1], sizeof(double) * (size_t)b->reps);
    bench_stats one = bench_stats_of(s1, b->reps), two = bench_stats_of(s2, b->reps);
    if (json) {
      printf("{\"name\":\"models_%s\",\"model\":\"%s\",\"prompt\":%lld,\"new\":%lld,\"reps\":%d,"
             "\"rank1_tok_s\":%.2f,\"rank1_min\":%.2f,\"rank1_max\":%.2f,"
             "\"tp2_tok_s\":%.2f,\"tp2_min\":%.2f,\"tp2_max\":%.2f,\"tp2_speedup\":%.3f}\n",
             phase[p], model, (long long)b->prompt, (long long)b->max_new, b->reps, one.median,
             one.min, one.max, two.median, two.min, two.max, two.median / one.median);
    } else {
      printf("models %s (%s, prompt %lld, %lld new, %d runs): 1 rank %.1f tokens/s (%.1f..%.1f), "
             "TP 2 %.1f tokens/s (%.1f..%.1f), %.2fx\n",
             phase[p], model, (long long)b->prompt, (long long)b->max_new, b->reps, one.median,
             one.min, one.max, two.median, two.min, two.max, two.median / one.median);
    }
  }
}

int bench_suite_models(int argc, char **argv) {
  bool json = tool_has_flag(argc, argv, "--json"), keep = tool_has_flag(argc, argv, "--keep");
  models_bench b = {.prompt = 64, .max_new = 32, .reps = 5};
  const char *model = NULL;
  const llama_size *z = &sizes[0];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json") || !strcmp(argv[i], "--keep")) continue;
    if (i + 1 >= argc) return usage();
    if (!strcmp(argv[i], "--model")) {
      model = argv[++i];
    } else if (!strcmp(argv[i], "--size")) {
      const char *v = argv[++i];
      z = !strcmp(v, "small") ? &sizes[0] : !strcmp(v, "tiny") ? &sizes[1] : NULL;
      if (!z) return usage();
    } else if (!strcmp(argv[i], "--prompt")) {
      b.prompt = atoll(argv[++i]);
    } else if (!strcmp(argv[i], "--new")) {
      b.max_new = atoll(argv[++i]);
    } else if (!strcmp(argv[i], "--reps")) {
      b.reps = atoi(argv[++i]);
    } else {
      return usage();
    }
  }
  if (b.prompt < 1 || b.max_new < 2 || b.reps < 1 || b.reps > MAX_REPS) return usage();
  bench_machine_print(json);
  dt__blas_set_threads(1);
  dt_status st = DT_OK;
  bool written = false;
  if (model) {
    snprintf(b.dir, sizeof b.dir, "%s", model);
  } else {
    snprintf(b.dir, sizeof b.dir, "/tmp/dt_bench_models_XXXXXX");
    if (!mkdtemp(b.dir)) {
      fprintf(stderr, "bench models: cannot create a temporary directory\n");
      return 1;
    }
    written = true;
    st = write_llama(z, b.dir);
    model = z->name;
  }
  if (!st) st = dt_comm_spawn(2, rank_main, &b);
  int rc = 0;
  if (st) {
    fprintf(stderr, "bench models: %s\n", dt_last_error());
    rc = 1;
  } else {
    report(json, &b, model);
  }
  if (written && !keep) {
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", b.dir);
    remove(path);
    snprintf(path, sizeof path, "%s/model.safetensors", b.dir);
    remove(path);
    rmdir(b.dir);
  } else if (written) {
    fprintf(stderr, "bench models: the model is in %s\n", b.dir);
  }
  return rc;
}
