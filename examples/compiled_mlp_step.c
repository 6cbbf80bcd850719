/* A compiled training step (docs/compile.md, "Training steps"): a 2-layer MLP
 * (Linear 16 -> 32, relu, Linear 32 -> 4) with an mse loss, its parameters captured by the
 * step function (as a module's are), compiled once with dt_compile(.backward = true,
 * .dynamic = true) so that each call runs forward and backward and accumulates every
 * parameter's .grad. Two copies of the same parameters train side by side with AdamW, one by
 * the eager step (the function, then dt_backward), one by the compiled step, on batches of
 * changing sizes. Checks that
 *   - every step's loss, and every parameter after the last step, are bitwise equal,
 *   - the batch sizes ran on one trace (one compile, no recompile).
 * Then times TIMED more steps of each at batch 32 by the process's CPU time and prints the
 * eager / compiled ratio (informational: not checked, it depends on the machine and its load).
 * Exits 0 when the checks hold, 1 otherwise (ctest example_compiled_mlp_step). */
#include <dtensor/dtensor.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum { IN = 16, HID = 32, OUT = 4, NP = 4, STEPS = 6, TIMED = 200 };

#define CHECK(call)                                                                                \
  do {                                                                                             \
    if ((call) != DT_OK) {                                                                         \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, dt_last_error());                         \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

typedef struct mlp {
  dt_tensor *p[NP]; /* w1 [HID, IN], b1 [HID], w2 [OUT, HID], b2 [OUT] */
} mlp;

/* The step function: in = {x [N, IN], target [N, OUT]}, out[0] = the mean squared error. It
 * reads the parameters through user; compile sees them as constants of the trace and
 * accumulates their .grad. */
static dt_status mlp_loss(void *user, int n_in, dt_tensor *const *in, int n_out, dt_tensor **out) {
  (void)n_in;
  (void)n_out;
  mlp *m = user;
  dt_tensor *h = NULL, *r = NULL, *y = NULL;
  dt_status st = dt_linear(in[0], m->p[0], m->p[1], &h);
  if (!st) st = dt_relu(h, &r);
  if (!st) st = dt_linear(r, m->p[2], m->p[3], &y);
  if (!st) st = dt_mse_loss(y, in[1], DT_LOSS_MEAN, &out[0]);
  dt_tensor_release(h);
  dt_tensor_release(r);
  dt_tensor_release(y);
  return st;
}

static dt_status mlp_init(mlp *m) {
  const int64_t shapes[NP][2] = {{HID, IN}, {HID}, {OUT, HID}, {OUT}};
  const int ndims[NP] = {2, 1, 2, 1};
  dt_status st = DT_OK;
  for (int i = 0; i < NP && !st; i++) {
    dt_tensor *r = NULL;
    st = dt_randn(ndims[i], shapes[i], DT_F32, 100 + i, &r);
    if (!st) st = dt_mul_scalar(r, 0.25, &m->p[i]);
    if (!st) st = dt_tensor_set_requires_grad(m->p[i], true);
    dt_tensor_release(r);
  }
  return st;
}

/* One training step on a batch: eager (compiled NULL) or compiled. *loss gets its value. */
static dt_status train_step(mlp *m, dt_optimizer *opt, dt_compiled *compiled, dt_tensor *x,
                            dt_tensor *target, double *loss) {
  dt_tensor *l = NULL;
  dt_status st = dt_optimizer_zero_grad(opt, true);
  if (!st && compiled) st = dt_compiled_call(compiled, 2, (dt_tensor *[]){x, target}, 1, &l);
  if (!st && !compiled) {
    st = mlp_loss(m, 2, (dt_tensor *[]){x, target}, 1, &l);
    if (!st) st = dt_backward(l, NULL);
  }
  if (!st) st = dt_optimizer_step(opt);
  if (!st) st = dt_tensor_to_doubles(l, loss, 1);
  dt_tensor_release(l);
  return st;
}

static dt_status batch(int64_t n, uint64_t seed, dt_tensor **x, dt_tensor **target) {
  dt_status st = dt_randn(2, (int64_t[]){n, IN}, DT_F32, seed, x);
  if (!st) st = dt_randn(2, (int64_t[]){n, OUT}, DT_F32, seed + 1000, target);
  return st;
}

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Bitwise equality of two parameters' values. */
static int same_bits(dt_tensor *a, dt_tensor *b) {
  int64_t n = dt_tensor_numel(a);
  return n == dt_tensor_numel(b) &&
         memcmp(dt_tensor_data(a), dt_tensor_data(b), (size_t)n * sizeof(float)) == 0;
}

int main(void) {
  mlp eager = {0}, comp = {0};
  CHECK(mlp_init(&eager));
  CHECK(mlp_init(&comp)); /* the same seeds: the same values */
  dt_optimizer *opt_eager = NULL, *opt_comp = NULL;
  CHECK(dt_optimizer_create_adamw(NP, eager.p, &(dt_adam_options){.lr = 1e-2}, &opt_eager));
  CHECK(dt_optimizer_create_adamw(NP, comp.p, &(dt_adam_options){.lr = 1e-2}, &opt_comp));
  dt_compiled *c = NULL;
  CHECK(dt_compile(mlp_loss, &comp, 2, 1, &(dt_compile_options){.dynamic = true, .backward = true},
                   &c));

  int failed = 0;
  const int64_t sizes[STEPS] = {8, 8, 5, 17, 2, 8};
  for (int s = 0; s < STEPS; s++) {
    dt_tensor *x = NULL, *t = NULL;
    double le = 0, lc = 0;
    CHECK(batch(sizes[s], 1 + (uint64_t)s, &x, &t));
    CHECK(train_step(&eager, opt_eager, NULL, x, t, &le));
    CHECK(train_step(&comp, opt_comp, c, x, t, &lc));
    printf("step %d  batch %2lld  loss eager %.9g  compiled %.9g\n", s + 1, (long long)sizes[s], le,
           lc);
    if (le != lc) {
      fprintf(stderr, "FAILED: step %d: the losses differ by %.3g\n", s + 1, lc - le);
      failed = 1;
    }
    dt_tensor_release(x);
    dt_tensor_release(t);
  }
  for (int i = 0; i < NP; i++)
    if (!same_bits(eager.p[i], comp.p[i])) {
      fprintf(stderr, "FAILED: parameter %d differs after %d steps\n", i, STEPS);
      failed = 1;
    }
  dt_compile_stats stats;
  CHECK(dt_compiled_stats(c, &stats));
  printf("compiles %lld, recompiles %lld, eager calls %lld\n", (long long)stats.compiles,
         (long long)stats.recompiles, (long long)stats.eager_calls);
  if (stats.compiles != 1 || stats.recompiles != 0 || stats.eager_calls != 0) {
    fprintf(stderr, "FAILED: expected one compile for every batch size\n");
    failed = 1;
  }

  /* Timing (informational): TIMED steps of each on one batch of 32. */
  dt_tensor *x = NULL, *t = NULL;
  double loss = 0, cpu[2] = {0};
  CHECK(batch(32, 77, &x, &t));
  for (int k = 0; k < 2; k++) {
    CHECK(train_step(k ? &comp : &eager, k ? opt_comp : opt_eager, k ? c : NULL, x, t, &loss));
    double t0 = cpu_seconds();
    for (int s = 0; s < TIMED; s++)
      CHECK(train_step(k ? &comp : &eager, k ? opt_comp : opt_eager, k ? c : NULL, x, t, &loss));
    cpu[k] = cpu_seconds() - t0;
  }
  printf("CPU time per step at batch 32: eager %.1f us, compiled %.1f us, eager/compiled %.2f "
         "(informational)\n",
         1e6 * cpu[0] / TIMED, 1e6 * cpu[1] / TIMED, cpu[1] > 0 ? cpu[0] / cpu[1] : 0.0);
  dt_tensor_release(x);
  dt_tensor_release(t);
  dt_compiled_destroy(c);
  dt_optimizer_destroy(opt_eager);
  dt_optimizer_destroy(opt_comp);
  for (int i = 0; i < NP; i++) {
    dt_tensor_release(eager.p[i]);
    dt_tensor_release(comp.p[i]);
  }
  return failed;
}
