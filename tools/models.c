/*
 * dtensor generate / dtensor finetune: a Hugging Face Llama or GPT-2 directory run on
 * --tp x --fsdp ranks (threads backend): token ids in, token ids or losses out.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "tools.h"

#define MAX_IDS 4096

typedef struct model_args {
  const char *model;
  int tp, fsdp;
  /* generate */
  int64_t prompt[MAX_IDS];
  int64_t n_prompt;
  int64_t max_new;
  dt_hf_sampling sampling;
  /* finetune */
  const char *data, *key, *out;
  int steps;
  double lr;
  int rc;
} model_args;

static int usage_error(const char *cmd, const char *what) {
  fprintf(stderr, "dtensor %s: %s (see dtensor %s --help)\n", cmd, what, cmd);
  return 2;
}

static bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

static bool parse_double(const char *s, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end) return false;
  *out = v;
  return true;
}

static bool parse_ids(const char *s, model_args *a) {
  a->n_prompt = 0;
  const char *p = s;
  while (*p) {
    char buf[32];
    size_t n = strcspn(p, ",");
    if (n == 0 || n >= sizeof buf || a->n_prompt == MAX_IDS) return false;
    memcpy(buf, p, n);
    buf[n] = '\0';
    if (!parse_int(buf, 0, INT64_MAX, &a->prompt[a->n_prompt++])) return false;
    p += n;
    if (*p == ',') {
      p++;
      if (!*p) return false;
    }
  }
  return a->n_prompt > 0;
}

/* The options both commands share, and each one's own. Returns 0, or 2 after a message. */
static int parse(const char *cmd, int argc, char **argv, model_args *a) {
  memset(a, 0, sizeof *a);
  a->tp = a->fsdp = 1;
  a->max_new = 16;
  a->steps = 10;
  a->lr = 1e-3;
  a->key = "input_ids";
  a->out = "finetuned";
  a->sampling.stop_token = -1;
  a->sampling.use_eos = true; /* transformers' generate stops at the config's eos ids */
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(o, "--ignore-eos")) { /* the one flag without a value */
      a->sampling.use_eos = false;
      continue;
    }
    int64_t n = 0;
    double d = 0;
    bool ok = v != NULL;
    if (!strcmp(o, "--model") && v)
      a->model = v;
    else if (!strcmp(o, "--tp") && v)
      ok = parse_int(v, 1, 64, &n), a->tp = (int)n;
    else if (!strcmp(o, "--fsdp") && v)
      ok = parse_int(v, 1, 64, &n), a->fsdp = (int)n;
    else if (!strcmp(o, "--prompt-ids") && v)
      ok = parse_ids(v, a);
    else if (!strcmp(o, "--max-new") && v)
      ok = parse_int(v, 0, MAX_IDS, &a->max_new);
    else if (!strcmp(o, "--temperature") && v)
      ok = parse_double(v, &a->sampling.temperature);
    else if (!strcmp(o, "--top-k") && v)
      ok = parse_int(v, 0, INT64_MAX, &a->sampling.top_k);
    else if (!strcmp(o, "--top-p") && v)
      ok = parse_double(v, &a->sampling.top_p);
    else if (!strcmp(o, "--seed") && v)
      ok = parse_int(v, 0, INT64_MAX, &n), a->sampling.seed = (uint64_t)n;
    else if (!strcmp(o, "--data") && v)
      a->data = v;
    else if (!strcmp(o, "--key") && v)
      a->key = v;
    else if (!strcmp(o, "--out") && v)
      a->out = v;
    else if (!strcmp(o, "--steps") && v)
      ok = parse_int(v, 1, 1000000, &n), a->steps = (int)n;
    else if (!strcmp(o, "--lr") && v)
      ok = parse_double(v, &d) && d > 0, a->lr = d;
    else {
      char msg[160];
      snprintf(msg, sizeof msg, "unknown option or missing value '%s'", o);
      return usage_error(cmd, msg);
    }
    if (!ok) {
      char msg[160];
      snprintf(msg, sizeof msg, "bad value '%s' for %s", v ? v : "", o);
      return usage_error(cmd, msg);
    }
    i++;
  }
  if (!a->model) return usage_error(cmd, "--model DIR is required");
  if (a->tp * a->fsdp > 64) return usage_error(cmd, "--tp x --fsdp is more than 64 ranks");
  return 0;
}

/* The mesh of --fsdp x --tp ("dp", "tp"; dims of size 1 dropped) and the model on it. */
static dt_status load_on(dt_comm *world, const model_args *a, dt_mesh **mesh, dt_hf_model **m) {
  int shape[2], nd = 0;
  const char *names[2];
  dt_hf_plan plan = {0};
  if (a->fsdp > 1) shape[nd] = a->fsdp, names[nd++] = "dp", plan.fsdp = "dp";
  if (a->tp > 1) shape[nd] = a->tp, names[nd++] = "tp", plan.tp = "tp";
  if (nd == 0) return dt_hf_model_load(a->model, NULL, NULL, m);
  dt_status st = dt_mesh_create(world, nd, shape, names, mesh);
  if (!st) st = dt_hf_model_load(a->model, *mesh, &plan, m);
  return st;
}

static dt_status generate_rank(dt_comm *world, void *arg) {
  model_args *a = arg;
  bool lead = !world || dt_comm_rank(world) == 0;
  dt_mesh *mesh = NULL;
  dt_hf_model *m = NULL;
  int64_t *out = malloc(sizeof(int64_t) * (size_t)(a->n_prompt + a->max_new));
  int64_t n = 0;
  double prefill = 0, decode = 0;
  dt_status st = out ? load_on(world, a, &mesh, &m) : DT_ERR_NOMEM;
  if (!st)
    st = dt_hf_generate(m, a->prompt, a->n_prompt, a->max_new, &a->sampling, out, &n, &prefill,
                        &decode);
  if (!st && lead) {
    printf("ids:");
    for (int64_t i = 0; i < n; i++) printf("%s%lld", i ? "," : " ", (long long)out[i]);
    printf("\nnew: %lld tokens on %d rank(s) (tp %d, fsdp %d)\n", (long long)(n - a->n_prompt),
           a->tp * a->fsdp, a->tp, a->fsdp);
    printf("prefill: %lld tokens in %.4f s, %.1f tokens/s\n", (long long)a->n_prompt, prefill,
           prefill > 0 ? (double)a->n_prompt / prefill : 0.0);
    if (n - a->n_prompt > 1)
      printf("decode: %lld tokens in %.4f s, %.1f tokens/s\n", (long long)(n - a->n_prompt - 1),
             decode, decode > 0 ? (double)(n - a->n_prompt - 1) / decode : 0.0);
  }
  free(out);
  dt_hf_model_destroy(m);
  dt_mesh_destroy(mesh);
  return st;
}

static int run_ranks(const char *cmd, model_args *a, dt_status (*fn)(dt_comm *, void *)) {
  int world = a->tp * a->fsdp;
  dt_status st = world == 1 ? fn(NULL, a) : dt_comm_spawn(world, fn, a);
  if (st) {
    char context[32];
    snprintf(context, sizeof context, "dtensor %s", cmd);
    tool_print_error(context);
    return 1;
  }
  return 0;
}

int tool_generate(int argc, char **argv) {
  model_args *a = malloc(sizeof *a);
  if (!a) return 1;
  int rc = parse("generate", argc, argv, a);
  if (!rc && a->n_prompt == 0) rc = usage_error("generate", "--prompt-ids 1,2,3 is required");
  if (!rc) rc = run_ranks("generate", a, generate_rank);
  free(a);
  return rc;
}

/* The data: tensor --key of --data, int64 [N, T]. */
static dt_status read_data(const model_args *a, dt_tensor **ids) {
  dt_safetensors *f = NULL;
  dt_status st = dt_safetensors_open(a->data, &f);
  if (!st) st = dt_safetensors_load(f, a->key, DT_SAFETENSORS_COPY, ids);
  dt_safetensors_destroy(f);
  return st;
}

static dt_status finetune_rank(dt_comm *world, void *arg) {
  model_args *a = arg;
  bool lead = !world || dt_comm_rank(world) == 0;
  dt_mesh *mesh = NULL;
  dt_hf_model *m = NULL;
  dt_tensor *ids = NULL, *params[4096];
  dt_optimizer *opt = NULL;
  dt_status st = read_data(a, &ids);
  if (!st) st = load_on(world, a, &mesh, &m);
  if (!st) st = dt_hf_model_set_trainable(m, true);
  int n = m ? dt_hf_model_param_count(m) : 0;
  for (int i = 0; i < n && i < 4096; i++) params[i] = dt_hf_model_param(m, i, NULL);
  dt_adam_options o = {.lr = a->lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  if (!st) st = dt_optimizer_create_adamw(n, params, &o, &opt);
  for (int step = 1; step <= a->steps && !st; step++) {
    dt_tensor *loss = NULL, *full = NULL;
    double v = 0, norm = 0;
    st = dt_optimizer_zero_grad(opt, true);
    if (!st) st = dt_hf_model_loss(m, ids, &loss);
    if (!st) st = dt_backward(loss, NULL);
    if (!st)
      st = dt_tensor_is_distributed(loss) ? dt_dist_full_tensor(loss, &full)
                                          : dt_detach(loss, &full);
    if (!st) st = dt_tensor_to_doubles(full, &v, 1);
    if (!st) st = dt_clip_grad_norm(n, params, 1.0, NULL, &norm);
    if (!st) st = dt_optimizer_step(opt);
    if (!st && lead) printf("step %4d  loss %.6f  grad norm %.4f\n", step, v, norm);
    dt_tensor_release(loss);
    dt_tensor_release(full);
  }
  if (!st) st = dt_hf_model_save(m, a->out);
  if (!st && lead) printf("saved %s/config.json and %s/model.safetensors\n", a->out, a->out);
  dt_optimizer_destroy(opt);
  dt_tensor_release(ids);
  dt_hf_model_destroy(m);
  dt_mesh_destroy(mesh);
  return st;
}

int tool_finetune(int argc, char **argv) {
  model_args *a = malloc(sizeof *a);
  if (!a) return 1;
  int rc = parse("finetune", argc, argv, a);
  if (!rc && !a->data) rc = usage_error("finetune", "--data TOKENS.safetensors is required");
  if (!rc) rc = run_ranks("finetune", a, finetune_rank);
  free(a);
  return rc;
}
