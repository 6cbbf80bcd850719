/*
 * dtensor bench models: a Hugging Face model's generation speed (prefill and decode tokens/s)
 * and fine-tuning speed (training tokens/s) on 1 rank and on 2 tensor-parallel ranks
 * (threads), in the same run, alternating (1 rank, TP 2, 1 rank, ...) so that drift in the
 * machine's load hits both alike. Each rank's BLAS runs one thread.
 *
 * Generation: dt_hf_generate of --new greedy tokens after a prompt of --prompt ids: prefill
 * tokens/s = prompt / prefill time, decode tokens/s = (new - 1) / decode time (the first new
 * token comes from the prefill). Training: a step is zero_grad, the causal-LM loss of --batch
 * x --seq token ids (forward and cross-entropy), backward and an AdamW step (lr 1e-3, betas
 * 0.9/0.95, eps 1e-8, weight decay 0.1), tokens/s = batch x seq / step time; every step's loss
 * is printed for both models (they start at the same weights: the losses must agree). Reports
 * the median and min..max of --reps runs after one warm-up.
 *
 * The model: --model DIR (a Hugging Face directory), else a random model written to a
 * temporary directory by this suite: --size small (Llama: vocab 2048, hidden 256, 4 layers, 8
 * heads over 4 kv heads of 32, intermediate 688), tiny (Llama: vocab 256, hidden 64, 2 layers,
 * 4 over 2, intermediate 160) or gpt2-small (GPT-2: vocab 50257, 768 wide, 12 layers, 12
 * heads, 1024 positions). bench/peers/models.py runs the same directory with transformers.
 *
 * Options: --json, --model DIR, --size small|tiny|gpt2-small, --only generate|train,
 * --prompt N (default 64), --new N (default 32), --batch N (default 4), --seq N (default 64),
 * --reps N (default 5), --keep (keep the written model, its path printed), --write-only
 * (write the model, print its path, run nothing). --attention-memory: another measurement
 * (bench_models_attention.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_machine.h"
#include "bench_models.h"
#include "bench_util.h"
#include "dtensor/dtensor.h"
#include "kernels/cpu/blas.h"
#include "tools.h"

#define MAX_REPS 32

static const bench_model_size sizes[] = {
    {"small", false, 2048, 256, 688, 4, 8, 4, 32, 4096},
    {"tiny", false, 256, 64, 160, 2, 4, 2, 16, 4096},
    {"gpt2-small", true, 50257, 768, 3072, 12, 12, 12, 64, 1024},
};

typedef struct models_bench {
  char dir[512];
  int64_t prompt, max_new, batch, seq;
  int reps;
  bool generate, train;
  double prefill[2][MAX_REPS], decode[2][MAX_REPS]; /* tokens/s: [0] 1 rank, [1] TP 2 */
  double train_tok_s[2][MAX_REPS];
  double losses[2][MAX_REPS + 1]; /* every training step's loss, the warm-up step's first */
} models_bench;

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

/* The fine-tuning data: ids[b][t] = (17 + 31 t + 997 b + (7 t^2 mod 101)) mod V, as
 * bench/peers/models.py makes them. */
static dt_status train_ids(int64_t V, int64_t B, int64_t T, dt_tensor **out) {
  int64_t *ids = malloc(sizeof(int64_t) * (size_t)(B * T));
  if (!ids) return DT_ERR_NOMEM;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++)
      ids[b * T + t] = (17 + 31 * t + 997 * b + (7 * t * t) % 101) % V;
  dt_status st = dt_from_data(ids, 2, (int64_t[]){B, T}, DT_I64, out);
  free(ids);
  return st;
}

/* The model made trainable and its AdamW (lr 1e-3, betas 0.9/0.95, eps 1e-8, decay 0.1). */
static dt_status train_setup(dt_hf_model *m, dt_optimizer **opt) {
  dt_status st = dt_hf_model_set_trainable(m, true);
  int n = dt_hf_model_param_count(m);
  dt_tensor **params = malloc(sizeof(dt_tensor *) * (size_t)n);
  if (!params) return DT_ERR_NOMEM;
  for (int i = 0; i < n; i++) params[i] = dt_hf_model_param(m, i, NULL);
  dt_adam_options o = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  if (!st) st = dt_optimizer_create_adamw(n, params, &o, opt);
  free(params);
  return st;
}

/* One fine-tuning step: zero_grad, the causal-LM loss (forward + cross-entropy), backward,
 * AdamW. Tokens/s of the step; its loss read afterwards (untimed). */
static dt_status train_step(dt_hf_model *m, dt_optimizer *opt, dt_tensor *ids, double *tok_s,
                            double *loss_value) {
  dt_tensor *loss = NULL, *full = NULL;
  double t0 = bench_now_us();
  dt_status st = dt_optimizer_zero_grad(opt, true);
  if (!st) st = dt_hf_model_loss(m, ids, &loss);
  if (!st) st = dt_backward(loss, NULL);
  if (!st) st = dt_optimizer_step(opt);
  double t1 = bench_now_us();
  *tok_s = (double)dt_tensor_numel(ids) / ((t1 - t0) * 1e-6);
  if (!st && dt_tensor_is_distributed(loss)) {
    st = dt_dist_full_tensor(loss, &full);
  } else if (!st) {
    full = dt_tensor_retain(loss);
  }
  if (!st) st = dt_tensor_to_doubles(full, loss_value, 1);
  dt_tensor_release(loss), dt_tensor_release(full);
  return st;
}

/* Generation runs, 1 rank and TP 2 alternating (rank 1 waits at the barrier while rank 0 runs
 * the 1-rank model). Run -1 warms up. */
static dt_status generate_runs(dt_comm *world, models_bench *b, dt_hf_model *single,
                               dt_hf_model *tp) {
  int rank = dt_comm_rank(world);
  dt_status st = DT_OK;
  for (int r = -1; r < b->reps && !st; r++) {
    double pf = 0, dc = 0;
    st = dt_comm_barrier(world);
    if (!st && rank == 0) st = generate_once(single, b, &pf, &dc);
    if (!st && r >= 0 && rank == 0) b->prefill[0][r] = pf, b->decode[0][r] = dc;
    if (!st) st = dt_comm_barrier(world);
    if (!st) st = generate_once(tp, b, &pf, &dc);
    if (!st && r >= 0 && rank == 0) b->prefill[1][r] = pf, b->decode[1][r] = dc;
  }
  return st;
}

/* Fine-tuning steps, 1 rank and TP 2 alternating, each model with its own AdamW from the
 * loaded weights: step -1 warms up (its loss is kept: the losses of both start at the same
 * weights). */
static dt_status train_runs(dt_comm *world, models_bench *b, dt_hf_model *single, dt_hf_model *tp) {
  int rank = dt_comm_rank(world);
  dt_optimizer *o1 = NULL, *o2 = NULL;
  dt_tensor *ids = NULL;
  dt_status st = train_ids(dt_hf_model_config(tp)->vocab_size, b->batch, b->seq, &ids);
  if (!st && rank == 0) st = train_setup(single, &o1);
  if (!st) st = train_setup(tp, &o2);
  for (int r = -1; r < b->reps && !st; r++) {
    double tok = 0, loss = 0;
    st = dt_comm_barrier(world);
    if (!st && rank == 0) st = train_step(single, o1, ids, &tok, &loss);
    if (!st && rank == 0) b->losses[0][r + 1] = loss;
    if (!st && r >= 0 && rank == 0) b->train_tok_s[0][r] = tok;
    if (!st) st = dt_comm_barrier(world);
    if (!st) st = train_step(tp, o2, ids, &tok, &loss);
    if (!st && rank == 0) b->losses[1][r + 1] = loss;
    if (!st && r >= 0 && rank == 0) b->train_tok_s[1][r] = tok;
  }
  dt_optimizer_destroy(o1), dt_optimizer_destroy(o2);
  dt_tensor_release(ids);
  return st;
}

/* Every rank of a 2-rank world: rank 0 alone runs the 1-rank model, both the TP 2 model. */
static dt_status rank_main(dt_comm *world, void *arg) {
  models_bench *b = arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  dt_hf_model *single = NULL, *tp = NULL;
  dt_hf_plan plan = {.tp = "tp"};
  dt_status st = dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"tp"}, &mesh);
  if (!st && rank == 0) st = dt_hf_model_load(b->dir, NULL, NULL, &single);
  if (!st) st = dt_hf_model_load(b->dir, mesh, &plan, &tp);
  if (!st && b->generate) st = generate_runs(world, b, single, tp);
  if (!st && b->train) st = train_runs(world, b, single, tp);
  dt_hf_model_destroy(single);
  dt_hf_model_destroy(tp);
  dt_mesh_destroy(mesh);
  return st;
}

static int usage(void) {
  fprintf(stderr, "bench models: bad or incomplete option (see 'dtensor bench models --help')\n");
  return 2;
}

static void report_generation(bool json, const models_bench *b, const char *model) {
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

static void print_losses(bool json, const char *key, const double *l, int n) {
  printf(json ? ",\"%s\":[" : "  %s:", key);
  for (int i = 0; i < n; i++)
    printf(json ? "%s%.7f" : "%s%.6f", i ? (json ? "," : " ") : " ", l[i]);
  printf(json ? "]" : "\n");
}

static void report_training(bool json, const models_bench *b, const char *model) {
  double s1[MAX_REPS], s2[MAX_REPS], worst = 0;
  memcpy(s1, b->train_tok_s[0], sizeof(double) * (size_t)b->reps);
  memcpy(s2, b->train_tok_s[1], sizeof(double) * (size_t)b->reps);
  bench_stats one = bench_stats_of(s1, b->reps), two = bench_stats_of(s2, b->reps);
  for (int i = 0; i <= b->reps; i++)
    worst = fmax(worst, fabs(b->losses[1][i] - b->losses[0][i]) / fabs(b->losses[0][i]));
  if (json) {
    printf("{\"name\":\"models_train\",\"model\":\"%s\",\"batch\":%lld,\"seq\":%lld,\"reps\":%d,"
           "\"rank1_tok_s\":%.2f,\"rank1_min\":%.2f,\"rank1_max\":%.2f,"
           "\"tp2_tok_s\":%.2f,\"tp2_min\":%.2f,\"tp2_max\":%.2f,\"tp2_speedup\":%.3f,"
           "\"tp2_vs_rank1_loss_rel\":%.3g",
           model, (long long)b->batch, (long long)b->seq, b->reps, one.median, one.min, one.max,
           two.median, two.min, two.max, two.median / one.median, worst);
    print_losses(json, "rank1_losses", b->losses[0], b->reps + 1);
    print_losses(json, "tp2_losses", b->losses[1], b->reps + 1);
    printf("}\n");
  } else {
    printf("models train (%s, batch %lld x seq %lld, AdamW, %d steps after 1 warm-up): 1 rank "
           "%.1f tokens/s (%.1f..%.1f), TP 2 %.1f tokens/s (%.1f..%.1f), %.2fx\n",
           model, (long long)b->batch, (long long)b->seq, b->reps, one.median, one.min, one.max,
           two.median, two.min, two.max, two.median / one.median);
    print_losses(json, "losses 1 rank", b->losses[0], b->reps + 1);
    print_losses(json, "losses TP 2 ", b->losses[1], b->reps + 1);
    printf("  largest TP 2 / 1 rank loss difference: %.3g relative\n", worst);
  }
}

static void remove_model(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/config.json", dir);
  remove(path);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  remove(path);
  rmdir(dir);
}

/* Parses the options into b; *model / *z from --model / --size. 0 or usage's 2. */
static int parse(int argc, char **argv, models_bench *b, const char **model,
                 const bench_model_size **z) {
  long long n = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json") || !strcmp(argv[i], "--keep") ||
        !strcmp(argv[i], "--write-only"))
      continue;
    if (i + 1 >= argc) return usage();
    const char *v = argv[++i];
    if (!strcmp(argv[i - 1], "--model")) {
      *model = v;
    } else if (!strcmp(argv[i - 1], "--size")) {
      *z = NULL;
      for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        if (!strcmp(v, sizes[k].name)) *z = &sizes[k];
      if (!*z) return usage();
    } else if (!strcmp(argv[i - 1], "--only")) {
      b->generate = !strcmp(v, "generate"), b->train = !strcmp(v, "train");
      if (!b->generate && !b->train) return usage();
    } else if (!strcmp(argv[i - 1], "--prompt")) {
      if (!bench_int_option(argv[i - 1], v, 1, 1 << 20, &n)) return usage();
      b->prompt = n;
    } else if (!strcmp(argv[i - 1], "--new")) {
      if (!bench_int_option(argv[i - 1], v, 1, 1 << 20, &n)) return usage();
      b->max_new = n;
    } else if (!strcmp(argv[i - 1], "--batch")) {
      if (!bench_int_option(argv[i - 1], v, 1, 1 << 20, &n)) return usage();
      b->batch = n;
    } else if (!strcmp(argv[i - 1], "--seq")) {
      if (!bench_int_option(argv[i - 1], v, 1, 1 << 20, &n)) return usage();
      b->seq = n;
    } else if (!strcmp(argv[i - 1], "--reps")) {
      if (!bench_int_option(argv[i - 1], v, 1, MAX_REPS, &n)) return usage();
      b->reps = (int)n;
    } else {
      return usage();
    }
  }
  if (b->prompt < 1 || b->max_new < 2 || b->batch < 1 || b->seq < 2 || b->reps < 1 ||
      b->reps > MAX_REPS)
    return usage();
  return 0;
}

int bench_suite_models(int argc, char **argv) {
  if (tool_has_flag(argc, argv, "--attention-memory")) return bench_models_attention(argc, argv);
  bool json = tool_has_flag(argc, argv, "--json"), keep = tool_has_flag(argc, argv, "--keep");
  bool write_only = tool_has_flag(argc, argv, "--write-only");
  models_bench b = {.prompt = 64,
                    .max_new = 32,
                    .batch = 4,
                    .seq = 64,
                    .reps = 5,
                    .generate = true,
                    .train = true};
  const char *model = NULL;
  const bench_model_size *z = &sizes[0];
  if (parse(argc, argv, &b, &model, &z)) return 2;
  if (write_only && model) return usage();
  if (!write_only) bench_machine_print(json);
  dt_set_num_threads(1); /* one thread: the BLAS's and the kernels' */
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
    st = bench_models_write(z, b.dir);
    model = z->name;
  }
  if (!st && !write_only) st = dt_comm_spawn(2, rank_main, &b);
  int rc = 0;
  if (st) {
    fprintf(stderr, "bench models: %s\n", dt_last_error());
    rc = 1;
  } else if (!write_only) {
    if (b.generate) report_generation(json, &b, model);
    if (b.train) report_training(json, &b, model);
  }
  if (written && !keep && !write_only)
    remove_model(b.dir);
  else if (written)
    fprintf(stderr, "bench models: the model is in %s\n", b.dir);
  return rc;
}
