/*
 * dtensor bench compile: what a compiled call costs against eager dispatch (issue 14).
 *
 *   per_node      a 100-node chain of small ops ([4, 4] float32: add, mul, relu, neg in turn)
 *                 called compiled and eagerly: nanoseconds per node (target <= 30 compiled,
 *                 and >= 3x less than eager).
 *   guard_check   the guard check of one compiled call (the chain's two inputs, both dims
 *                 dynamic).
 *   compile_time  tracing and analysing the 100-node chain (target <= 2 ms); the eager run of
 *                 the trace is included.
 *   seed          the seed embedding (Replicate 202048x256 float32 weight, to(float32),
 *                 embedding of int64 indices) on one rank at (2, 512), (3, 100), (1, 1) and
 *                 (8, 2048): compiled against eager, recompiles (0 expected), and whether the
 *                 weight was copied (never: to(float32) is the weight itself).
 *
 *   train_step    a training step (two Linear layers 64-128-16 with relu, an mse loss, four
 *                 parameters that require grad) compiled with options.backward against eager
 *                 (the function, then dt_backward), batch 32 and 7 (dynamic, no recompile):
 *                 wall and CPU microseconds per step and eager / compiled
 *                 (bench/bench_compile_train.c; --train runs this row alone, --instructions
 *                 counts its instructions per step under callgrind, --child runs one side).
 *
 * Sides alternate (A B A B ...) and medians are reported. Options: --json, --iters N,
 * --batch B (the training step's batch, instead of 32 and 7), --steps N (--instructions).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_machine.h"
#include "bench_util.h"
#include "compile/compile_impl.h"
#include "kernels/kernel_table.h"
#include "dtensor/compile.h"
#include "dtensor/dtensor.h"
#include "tools.h"

#define MAX_ITERS 64
#define CHAIN 100

/* The suite's entry in bench/bench.c's table. */
int bench_suite_compile(int argc, char **argv);

/* The training step's modes (bench/bench_compile_train.c). */
int bench_compile_train_time(bool json, int iters, const int64_t *batches, int n_batches);
int bench_compile_train_instructions(bool json, int steps, const int64_t *batches, int n_batches);
int bench_compile_train_child(bool compiled, int64_t batch, int steps);

static int usage(void) {
  fprintf(stderr,
          "usage: dtensor bench compile [--json] [--iters N] [--device cpu|cuda]\n"
          "       dtensor bench compile --train [--json] [--iters N] [--batch B]\n"
          "       dtensor bench compile --instructions [--json] [--steps N] [--batch B]\n"
          "       dtensor bench compile --child --side eager|compiled --batch B [--steps N]\n");
  return 2;
}

/* The chain: node k applies add, mul, relu or neg (k mod 4) to the previous value. */
static dt_status chain_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user;
  (void)n_in;
  (void)n_out;
  dt_tensor *cur = dt_tensor_retain(in[0]), *next = NULL;
  dt_status st = DT_OK;
  for (int k = 0; k < CHAIN && !st; k++) {
    switch (k % 4) {
    case 0: st = dt_add(cur, in[1], &next); break;
    case 1: st = dt_mul(cur, in[1], &next); break;
    case 2: st = dt_relu(cur, &next); break;
    default: st = dt_neg(cur, &next); break;
    }
    dt_tensor_release(cur);
    cur = next;
    next = NULL;
  }
  out[0] = st ? NULL : cur;
  if (st) dt_tensor_release(cur);
  return st;
}

/* Microseconds per call of reps calls, compiled (c) or eager (c NULL). */
static dt_status time_calls(dt_compiled *c, dt_compile_fn fn, void *user, int n_in,
                            dt_tensor *const *in, int reps, double *us) {
  dt_status st = DT_OK;
  double t0 = bench_now_us();
  for (int i = 0; i < reps && !st; i++) {
    dt_tensor *y = NULL;
    st = c ? dt_compiled_call(c, n_in, in, 1, &y) : fn(user, n_in, in, 1, &y);
    dt_tensor_release(y);
  }
  *us = (bench_now_us() - t0) / reps;
  return st;
}

/* Median compiled and eager microseconds per call, sides alternating. */
static dt_status compare(dt_compiled *c, dt_compile_fn fn, void *user, int n_in,
                         dt_tensor *const *in, int reps, int iters, double *compiled,
                         double *eager) {
  double a[MAX_ITERS], b[MAX_ITERS], warm;
  dt_status st = time_calls(c, fn, user, n_in, in, reps, &warm);
  if (!st) st = time_calls(NULL, fn, user, n_in, in, reps, &warm);
  for (int i = 0; i < iters && !st; i++) {
    st = time_calls(c, fn, user, n_in, in, reps, &a[i]);
    if (!st) st = time_calls(NULL, fn, user, n_in, in, reps, &b[i]);
  }
  if (st) return st;
  *compiled = bench_median(a, iters);
  *eager = bench_median(b, iters);
  return DT_OK;
}

/* The kernels of the chain alone, called directly on preallocated tensors: the floor under
 * both sides, so that overhead = time per node - this. Nanoseconds per node. */
static dt_status time_kernels(dt_tensor *x, dt_tensor *y, int reps, double *ns) {
  static const dt_op ops[4] = {DT_OP_ADD, DT_OP_MUL, DT_OP_RELU, DT_OP_NEG};
  dt_tensor *bufs[2] = {NULL, NULL};
  dt_status st = dt_empty(2, (int64_t[]){4, 4}, DT_F32, &bufs[0]);
  if (!st) st = dt_empty(2, (int64_t[]){4, 4}, DT_F32, &bufs[1]);
  /* The calls are built before timing: node k reads node k - 1's buffer, writes the other. */
  static dt_op_call calls[CHAIN];
  for (int k = 0; k < CHAIN && !st; k++) {
    calls[k] = (dt_op_call){.op = ops[k % 4],
                            .n_inputs = k % 4 < 2 ? 2 : 1,
                            .inputs = {k ? bufs[(k - 1) & 1] : x, y},
                            .scalars = {1, 0},
                            .n_outputs = 1,
                            .outputs = &bufs[k & 1]};
  }
  double t0 = bench_now_us();
  for (int r = 0; r < reps && !st; r++) {
    for (int k = 0; k < CHAIN && !st; k++) st = dt__cpu_kernels[calls[k].op](&calls[k]);
  }
  *ns = (bench_now_us() - t0) * 1e3 / reps / CHAIN;
  dt_tensor_release(bufs[0]);
  dt_tensor_release(bufs[1]);
  return st;
}

static dt_status bench_chain(bool json, int iters) {
  dt_tensor *x = NULL, *y = NULL;
  dt_status st = dt_rand(2, (int64_t[]){4, 4}, DT_F32, 1, &x);
  if (!st) st = dt_rand(2, (int64_t[]){4, 4}, DT_F32, 2, &y);
  dt_tensor *in[2] = {x, y};
  /* Compile time: a fresh handle's first call, best of iters. */
  double compile_us[MAX_ITERS];
  for (int i = 0; i < iters && !st; i++) {
    dt_compiled *c = NULL;
    st = dt_compile(chain_fn, NULL, 2, 1, &(dt_compile_options){.dynamic = true}, &c);
    dt_tensor *out = NULL;
    double t0 = bench_now_us();
    if (!st) st = dt_compiled_call(c, 2, in, 1, &out);
    compile_us[i] = bench_now_us() - t0;
    dt_tensor_release(out);
    dt_compiled_destroy(c);
  }
  dt_compiled *c = NULL;
  if (!st) st = dt_compile(chain_fn, NULL, 2, 1, &(dt_compile_options){.dynamic = true}, &c);
  double compiled = 0, eager = 0;
  if (!st) st = compare(c, chain_fn, NULL, 2, in, 2000, iters, &compiled, &eager);
  /* Kernel floor: median of iters runs, each between a compiled and an eager run. */
  double kernel_samples[MAX_ITERS], kernel_ns = 0, dummy = 0;
  for (int i = 0; i < iters && !st; i++) {
    st = time_calls(c, chain_fn, NULL, 2, in, 500, &dummy);
    if (!st) st = time_kernels(x, y, 500, &kernel_samples[i]);
    if (!st) st = time_calls(NULL, chain_fn, NULL, 2, in, 500, &dummy);
  }
  if (!st) kernel_ns = bench_median(kernel_samples, iters);
  /* The guard check alone. */
  double guard_ns = 0;
  if (!st) {
    int reps = 1000000, hits = 0;
    double t0 = bench_now_us();
    for (int i = 0; i < reps; i++) hits += dt__compiled_find_variant(c, 2, in) == 0;
    guard_ns = (bench_now_us() - t0) * 1e3 / reps;
    if (hits != reps) st = dt__error(DT_ERR_INTERNAL, "bench compile: a guard failed");
  }
  if (!st) {
    double best = bench_min(compile_us, iters);
    double per_c = compiled * 1e3 / CHAIN, per_e = eager * 1e3 / CHAIN;
    if (json) {
      printf("{\"name\":\"compile_per_node\",\"nodes\":%d,\"shape\":[4,4],\"compiled_ns\":%.1f,"
             "\"eager_ns\":%.1f,\"kernel_ns\":%.1f,\"compiled_overhead_ns\":%.1f,"
             "\"eager_overhead_ns\":%.1f,\"overhead_ratio\":%.2f,\"target_overhead_ns\":30,"
             "\"target_ratio\":3}\n",
             CHAIN, per_c, per_e, kernel_ns, per_c - kernel_ns, per_e - kernel_ns,
             (per_e - kernel_ns) / (per_c - kernel_ns));
      printf("{\"name\":\"compile_guard_check\",\"ns\":%.1f}\n", guard_ns);
      printf("{\"name\":\"compile_time\",\"nodes\":%d,\"us\":%.1f,\"target_us\":2000}\n", CHAIN,
             best);
    } else {
      printf("per node (%d-node chain, [4, 4] f32): compiled %.1f ns, eager %.1f ns, kernel alone "
             "%.1f ns;\n  overhead per node: compiled %.1f ns, eager %.1f ns, %.2fx less (target "
             "<= 30 ns, >= 3x)\n",
             CHAIN, per_c, per_e, kernel_ns, per_c - kernel_ns, per_e - kernel_ns,
             (per_e - kernel_ns) / (per_c - kernel_ns));
      printf("guard check per call: %.1f ns\n", guard_ns);
      printf("compile time of the %d-node chain: %.0f us (target <= 2000)\n", CHAIN, best);
    }
  }
  dt_compiled_destroy(c);
  dt_tensor_release(x);
  dt_tensor_release(y);
  return st;
}

/* ---- The seed embedding ----------------------------------------------------------------- */

static dt_status seed_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user;
  (void)n_in;
  (void)n_out;
  dt_tensor *w32 = NULL;
  dt_status st = dt_to(in[0], DT_F32, &w32);
  if (!st) st = dt_embedding(w32, in[1], &out[0]);
  dt_tensor_release(w32);
  return st;
}

typedef struct seed_arg {
  bool json;
  int iters;
  const char *device; /* the seed's mesh: "cpu" or "cuda" (--device) */
} seed_arg;

static dt_status seed_rank(dt_comm *world, void *varg) {
  seed_arg *arg = varg;
  int size = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  dt_tensor *w = NULL, *weight = NULL;
  dt_compiled *c = NULL;
  dt_status st = dt_mesh_create_on(arg->device, world, 1, &size, NULL, &mesh);
  dt_tensor_options on = {.device = dt_mesh_device(mesh)};
  if (!st) st = dt_full_ex(2, (int64_t[]){202048, 256}, 1.0, DT_F32, &on, &w);
  dt_placement r = dt_replicate();
  if (!st) st = dt_dist_from_local(mesh, w, 1, &r, NULL, &weight);
  if (!st) st = dt_tensor_set_requires_grad(weight, true);
  bool prev = dt_grad_mode_set(false);
  if (!st) st = dt_compile(seed_fn, NULL, 2, 1, &(dt_compile_options){.dynamic = true}, &c);
  static const int64_t sizes[4][2] = {{2, 512}, {3, 100}, {1, 1}, {8, 2048}};
  for (int s = 0; s < 4 && !st; s++) {
    dt_tensor *il = NULL, *idx = NULL;
    st = dt_full_ex(2, sizes[s], 0.0, DT_I64, &on, &il);
    if (!st) st = dt_dist_from_local(mesh, il, 1, &r, NULL, &idx);
    dt_tensor *in[2] = {weight, idx};
    int reps = sizes[s][0] * sizes[s][1] > 10000 ? 20 : 2000;
    double compiled = 0, eager = 0;
    if (!st) st = compare(c, seed_fn, NULL, 2, in, reps, arg->iters, &compiled, &eager);
    if (!st && arg->json) {
      printf("{\"name\":\"compile_seed_embedding\",\"device\":\"%s\",\"indices\":[%lld,%lld],"
             "\"compiled_us\":%.2f,\"eager_us\":%.2f}\n",
             arg->device, (long long)sizes[s][0], (long long)sizes[s][1], compiled, eager);
    } else if (!st) {
      printf("seed embedding (%lld, %lld): compiled %.2f us, eager %.2f us\n",
             (long long)sizes[s][0], (long long)sizes[s][1], compiled, eager);
    }
    dt_tensor_release(idx);
    dt_tensor_release(il);
  }
  dt_compile_stats stats = {0};
  if (!st) st = dt_compiled_stats(c, &stats);
  /* The weight is never copied: to(float32) of the float32 weight is the weight. */
  if (!st) {
    if (arg->json)
      printf("{\"name\":\"compile_seed_recompiles\",\"device\":\"%s\",\"recompiles\":%lld,"
             "\"weight_bytes\":%lld,\"weight_copied\":false}\n",
             arg->device, (long long)stats.recompiles, (long long)202048 * 256 * 4);
    else
      printf("seed: %lld recompiles over the four sizes; the %lld-byte weight is not copied\n",
             (long long)stats.recompiles, (long long)202048 * 256 * 4);
  }
  dt_grad_mode_set(prev);
  dt_compiled_destroy(c);
  dt_tensor_release(weight);
  dt_tensor_release(w);
  dt_mesh_destroy(mesh);
  return st;
}

/* ---- A distributed call that redistributes ------------------------------------------------ */

/* out = a + b with a Shard(0) and b Shard(1): eager dispatch plans (a cache hit) and moves b
 * each call; the compiled call runs its redistribute node from the traced plan, then the add
 * on the shards. 2 thread ranks; rank 0 prints. */
static dt_status redist_fn(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)user, (void)n_in, (void)n_out;
  return dt_add(in[0], in[1], &out[0]);
}

static dt_status redist_rank(dt_comm *world, void *varg) {
  seed_arg *arg = varg;
  int size = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  dt_compiled *c = NULL;
  dt_status st = dt_mesh_create(world, 1, &size, NULL, &mesh);
  if (!st) st = dt_compile(redist_fn, NULL, 2, 1, &(dt_compile_options){.dynamic = true}, &c);
  static const int64_t sizes[2] = {8, 256};
  for (int s = 0; s < 2 && !st; s++) {
    int64_t shape[2] = {sizes[s], sizes[s]};
    dt_tensor *fa = NULL, *fb = NULL, *in[2] = {NULL, NULL};
    st = dt_rand(2, shape, DT_F32, 1, &fa);
    if (!st) st = dt_rand(2, shape, DT_F32, 2, &fb);
    if (!st) st = dt_dist_distribute_tensor(mesh, fa, 1, (dt_placement[]){dt_shard(0)}, &in[0]);
    if (!st) st = dt_dist_distribute_tensor(mesh, fb, 1, (dt_placement[]){dt_shard(1)}, &in[1]);
    double compiled = 0, eager = 0;
    if (!st)
      st = compare(c, redist_fn, NULL, 2, in, sizes[s] > 64 ? 200 : 2000, arg->iters, &compiled,
                   &eager);
    if (!st && dt_comm_rank(world) == 0) {
      if (arg->json)
        printf("{\"name\":\"compile_redistribute_add\",\"shape\":[%lld,%lld],\"ranks\":%d,"
               "\"compiled_us\":%.2f,\"eager_us\":%.2f}\n",
               (long long)shape[0], (long long)shape[1], size, compiled, eager);
      else
        printf("add of S(0) and S(1) [%lld, %lld] on %d ranks: compiled %.2f us, eager %.2f us\n",
               (long long)shape[0], (long long)shape[1], size, compiled, eager);
    }
    dt_tensor *all[] = {fa, fb, in[0], in[1]};
    for (int k = 0; k < 4; k++) dt_tensor_release(all[k]);
  }
  dt_compile_stats stats = {0};
  if (!st) st = dt_compiled_stats(c, &stats);
  if (!st && stats.recompiles != 0)
    st = dt__error(DT_ERR_INTERNAL, "bench compile: the redistributing add recompiled: %s",
                   dt_compiled_recompile_reason(c, 0));
  dt_compiled_destroy(c);
  dt_mesh_destroy(mesh);
  return st;
}

int bench_suite_compile(int argc, char **argv) {
  bool json = false, train = false, instructions = false, child = false;
  int iters = 7, side = -1; /* side: 1 compiled, 0 eager (--child) */
  long long steps = 200, batch = 0;
  const char *device = "cpu";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (strcmp(argv[i], "--train") == 0) {
      train = true;
    } else if (strcmp(argv[i], "--instructions") == 0) {
      instructions = true;
    } else if (strcmp(argv[i], "--child") == 0) {
      child = true;
    } else if (i + 1 >= argc) {
      return usage();
    } else if (strcmp(argv[i], "--iters") == 0) {
      iters = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--steps") == 0) {
      if (!bench_int_option("--steps", argv[++i], 1, 1000000, &steps)) return 2;
    } else if (strcmp(argv[i], "--batch") == 0) {
      if (!bench_int_option("--batch", argv[++i], 1, 1 << 20, &batch)) return 2;
    } else if (strcmp(argv[i], "--side") == 0) {
      i++;
      side = strcmp(argv[i], "compiled") == 0 ? 1 : strcmp(argv[i], "eager") == 0 ? 0 : -2;
      if (side == -2) return usage();
    } else if (strcmp(argv[i], "--device") == 0) {
      device = argv[++i];
      if (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0) return usage();
    } else {
      return usage();
    }
  }
  if (iters < 1 || iters > MAX_ITERS || train + instructions + child > 1) return usage();
  int64_t batches[2] = {32, 7};
  int n_batches = batch ? 1 : 2;
  if (batch) batches[0] = batch;
  if (child) {
    if (side < 0 || !batch) return usage();
    return bench_compile_train_child(side == 1, batch, (int)steps);
  }
  bench_machine_print(json);
  if (instructions) return bench_compile_train_instructions(json, (int)steps, batches, n_batches);
  if (train) return bench_compile_train_time(json, iters, batches, n_batches);
  bool cpu = strcmp(device, "cpu") == 0;
  /* --device cuda: seed 004 only (the other rows are CPU figures). */
  dt_status st = cpu ? bench_chain(json, iters) : DT_OK;
  if (!st && cpu && bench_compile_train_time(json, iters, batches, n_batches)) return 1;
  seed_arg arg = {.json = json, .iters = iters, .device = device};
  if (!st) st = dt_comm_spawn(1, seed_rank, &arg);
  if (!st && cpu) st = dt_comm_spawn(2, redist_rank, &arg);
  if (st) {
    fprintf(stderr, "bench compile: %s\n", dt_last_error());
    return 1;
  }
  return 0;
}
