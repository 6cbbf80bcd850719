/*
 * dtensor demo — the main job trains: a small decoder-only transformer built from the op
 * table, trained with AdamW on a 2 (dp) x 2 (tp) mesh of 4 ranks (threads), to reverse
 * token sequences.
 *
 *   - token and positional embeddings, pre-norm blocks (layer_norm, causal self-attention
 *     from matmul + softmax with a masked_fill causal mask, a GELU MLP), a final layer_norm
 *     and an LM head whose logits stay Shard(-1) on tp into the vocabulary-parallel
 *     cross-entropy (PyTorch's loss_parallel);
 *   - Megatron placements on "tp": q, k, v and MLP up colwise (weight Shard(0)), attention out
 *     and MLP down rowwise (weight Shard(1)), the LM head colwise; the batch Shard(0) on "dp";
 *     every parameter is Replicate on "dp", so its gradient comes out Partial(sum) over dp and
 *     the optimizer step reduces it (data parallelism);
 *   - every run is a distributed program: the 1-rank reference is the same code on a 1 x 1
 *     mesh, and every step's loss of the two runs is compared.
 *
 * Writes dtensor_demo_trace.json (a Chrome trace of a few steps) and dtensor_demo_loss.svg.
 * Options: --steps N (default 300), --log-every N, --backend threads|mpi (or DT_BACKEND=mpi:
 * under mpirun -n 4 each process is one rank; rank 0 reports and runs the 1-rank check),
 * --device cpu|cuda (the meshes' device: on cuda the rank threads share the GPU, or take one
 * each, and the 1-rank reference runs on the GPU too; without a GPU the mesh is refused).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "demo_model.h"
#include "dtensor/dtensor.h"
#include "profile/output_file.h"
#include "tools.h"

#define MAX_STEPS 100000
#define MIN_LEARNING_STEPS 20 /* from this many steps on, the demo fails unless the loss fell */
/* The N-rank run against the 1-rank run. The two sum in different orders, so their losses
 * differ by float rounding, which a long run amplifies once it has converged (loss ~1e-8,
 * where Adam's steps are dominated by rounding): at 3,000 steps each run has a few isolated
 * spikes, at different steps (a 0.74 difference at step 2,377 after agreeing within 1e-7).
 * So the first TIGHT_STEPS steps are compared one by one, and the rest in distribution: in
 * blocks of BLOCK_STEPS (the last one absorbing the remainder), the two runs' median losses,
 * which isolated spikes do not move, must agree. */
#define TIGHT_STEPS 300       /* compared step by step (the default run: every step) */
#define LOSS_TOLERANCE 1e-4   /* max |loss(N ranks) - loss(1 rank)| over those steps */
#define BLOCK_STEPS 500       /* after them, blocks of at least this many steps ... */
#define MEDIAN_TOLERANCE 1e-3 /* ... whose median losses differ by at most this */
#define PP_MICROBATCHES 4     /* with --mesh dp=..,pp=2,tp=..: 1F1B over 4 microbatches */

typedef struct train_run {
  int world;      /* dp x pp x tp ranks */
  int dp, pp, tp; /* the mesh: pp 1 is the 2-D ("dp", "tp") mesh, pp 2 two pipeline stages */
  int steps, log_every;
  dt_profiler *profiler;  /* started and stopped by rank 0 around each logged step, or NULL */
  const char *trace_path; /* where rank 0 writes the trace (also at every progress line) */
  double comm_share;      /* comm time / step time over the profiled steps, mean of ranks */
  int profiled_steps;
  bool process_per_rank; /* MPI: every rank drives the profiler of its own process */
  bool quiet;            /* no progress lines (the reference run) */
  const char *device;    /* the meshes' device kind: "cpu" or "cuda" (--device) */
  double *losses;        /* [steps], written by rank 0 */
  double seconds;        /* wall time of the training loop, rank 0 */
  int64_t comm_bytes;    /* bytes rank 0 sent through collectives over the run */
  char ledger[4096];     /* rank 0's comm ledger table: op, collective, calls, bytes */
} train_run;

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0..n) (n >= 1), sorted in scratch. */
static double median_of(const double *v, int n, double *scratch) {
  memcpy(scratch, v, sizeof *v * (size_t)n);
  qsort(scratch, (size_t)n, sizeof *scratch, compare_doubles);
  return n % 2 ? scratch[n / 2] : 0.5 * (scratch[n / 2 - 1] + scratch[n / 2]);
}

/* What the loss check found (see TIGHT_STEPS). */
typedef struct loss_check {
  int tight_steps;
  double tight_max;  /* max |a - b| over the first tight_steps steps (INFINITY: not finite) */
  int blocks;        /* blocks of the steps after them */
  double median_max; /* max |median(a) - median(b)| over the blocks */
  double step_max;   /* max |a - b| over the steps after them (reported, not a criterion) */
  bool finite;       /* every loss of both runs is finite */
} loss_check;

static loss_check check_losses(const double *a, const double *b, int steps, double *scratch) {
  loss_check c = {.tight_steps = steps < TIGHT_STEPS ? steps : TIGHT_STEPS, .finite = true};
  for (int i = 0; i < steps; i++) {
    c.finite &= isfinite(a[i]) && isfinite(b[i]);
    double d = fabs(a[i] - b[i]);
    if (i < c.tight_steps) c.tight_max = isfinite(d) ? fmax(c.tight_max, d) : INFINITY;
    if (i >= c.tight_steps) c.step_max = isfinite(d) ? fmax(c.step_max, d) : INFINITY;
  }
  for (int start = c.tight_steps; start < steps;) {
    int n = steps - start < 2 * BLOCK_STEPS ? steps - start : BLOCK_STEPS;
    double d = fabs(median_of(a + start, n, scratch) - median_of(b + start, n, scratch));
    c.median_max = isfinite(d) ? fmax(c.median_max, d) : INFINITY;
    c.blocks++;
    start += n;
  }
  return c;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rank 0 starts or stops the profiler between two barriers, so that the trace covers the
 * same steps on every rank; *when is the time (rank 0) at which every rank has arrived. */
static dt_status profiler_switch(dt_comm *world, const train_run *r, bool start, double *when) {
  dt_profiler *profiler = r->profiler;
  dt_status st = dt_comm_barrier(world);
  *when = now_seconds();
  if (!st && (dt_comm_rank(world) == 0 || r->process_per_rank))
    st = start ? dt_profiler_start(profiler) : dt_profiler_stop(profiler);
  if (!st) st = dt_comm_barrier(world);
  return st;
}

/* The time every rank's comm lane was busy in the trace so far, summed over ranks (us), and
 * the number of ranks (processes) in it. The trace is written to path and read back. */
static dt_status trace_comm_us(const dt_profiler *profiler, const char *path, double *comm_us,
                               int *ranks) {
  dt_trace *trace = NULL;
  dt_status st = dt_profiler_write_chrome_trace(profiler, path);
  if (!st) st = dt_trace_read_file(path, &trace);
  *comm_us = 0;
  *ranks = 0;
  for (int p = 0; !st && p < dt_trace_process_count(trace); p++) {
    dt_trace_process_info pi;
    st = dt_trace_process(trace, p, &pi);
    if (!st) *ranks += 1;
    for (int l = 0; !st && l < pi.lanes; l++) {
      dt_trace_lane_info li;
      st = dt_trace_lane(trace, p, l, &li);
      if (!st && strncmp(li.name, "comm", 4) == 0) *comm_us += li.busy_us;
    }
  }
  dt_trace_destroy(trace);
  return st;
}

static dt_status train_rank(dt_comm *world, void *arg) {
  train_run *r = arg;
  int rank = dt_comm_rank(world);
  dt_mesh *mesh = NULL;
  dt_pp_mesh *pm = NULL;
  demo_model *model = NULL;
  dt_comm_ledger *ledger = NULL;
  dt_status st;
  if (r->pp > 1) {
    st = dt_pp_mesh_create(world, 3, (int[]){r->dp, r->pp, r->tp},
                           (const char *const[]){"dp", "pp", "tp"}, "pp", &pm);
    if (!st) st = demo_model_create_pipelined(pm, PP_MICROBATCHES, &model);
  } else {
    st = dt_mesh_create_on(r->device, world, 2, (int[]){r->dp, r->tp},
                           (const char *const[]){"dp", "tp"}, &mesh);
    if (!st) st = demo_model_create(mesh, &model);
  }
  if (!st) st = dt_comm_ledger_start(&ledger);
  double t0 = now_seconds(), t_log = t0, overhead = 0; /* overhead: writing traces (rank 0) */
  double profiled_s = 0, comm_us = 0;                  /* over the profiled steps so far */
  int64_t bytes_log = 0;
  int logged = -1; /* the last step with a progress line */
  for (int step = 0; step < r->steps && !st; step++) {
    /* The steps with a progress line are profiled: their comm share is that line's. */
    bool log_step = (step + 1) % r->log_every == 0 || step == 0 || step + 1 == r->steps;
    double t_start = 0, t_stop = 0;
    if (r->profiler && log_step) st = profiler_switch(world, r, true, &t_start);
    if (st) break;
    double value = NAN;
    st = demo_model_step(model, step, &value);
    if (st) break;
    if (r->profiler && log_step) st = profiler_switch(world, r, false, &t_stop);
    if (st) break;
    if (rank == 0) r->losses[step] = value;
    if (rank == 0 && log_step) {
      double t = now_seconds(), share = NAN, total_comm_us = comm_us;
      int ranks = 0;
      if (r->profiler) {
        /* This step's comm share: the comm lanes' new busy time over the step's wall time
         * times the ranks (each rank's share, averaged). */
        st = trace_comm_us(r->profiler, r->trace_path, &total_comm_us, &ranks);
        if (!st && ranks > 0 && t_stop > t_start) {
          share = (total_comm_us - comm_us) / (1e6 * (t_stop - t_start) * ranks);
          profiled_s += (t_stop - t_start) * ranks;
          comm_us = total_comm_us;
          r->profiled_steps++;
        }
      }
      int64_t bytes = dt_comm_ledger_bytes(ledger, NULL);
      int n = step - logged;
      if (!r->quiet && !st) {
        printf("  step %4d  loss %7.4f  %8.0f tokens/s  comm %5.1f %% of the step, %6.1f "
               "KB/step/rank\n",
               step + 1, value, (double)(n * BATCH * SEQ) / (t - t_log - overhead), 100 * share,
               (double)(bytes - bytes_log) / n / 1024);
        fflush(stdout);
      }
      overhead = now_seconds() - t; /* the trace written above is not training time */
      t_log = t;
      bytes_log = bytes;
      logged = step;
    }
  }
  if (rank == 0 && profiled_s > 0) r->comm_share = comm_us / (1e6 * profiled_s);
  if (rank == 0) {
    r->seconds = now_seconds() - t0;
    if (ledger) r->comm_bytes = dt_comm_ledger_bytes(ledger, NULL);
    if (ledger && dt_comm_ledger_format(ledger, r->ledger, sizeof r->ledger)) r->ledger[0] = 0;
  }
  if (ledger) dt_comm_ledger_stop(ledger);
  dt_comm_ledger_destroy(ledger);
  demo_model_destroy(model);
  dt_mesh_destroy(mesh);
  dt_pp_mesh_destroy(pm);
  return st;
}

/* The loss curves as an SVG polyline each, written through dt__output_open: a reader never
 * sees half a file, and a link planted at the name in a shared folder is replaced, never
 * followed. */
static int write_loss_svg(const char *path, const char *label, const double *a, const double *b,
                          int n) {
  dt__output_file out;
  FILE *f = dt__output_open(&out, path);
  if (!f) return -1;
  double hi = 0;
  for (int i = 0; i < n; i++) hi = fmax(hi, fmax(a[i], b ? b[i] : 0));
  if (!(hi > 0)) hi = 1;
  const double w = 640, h = 360, m = 40;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\">\n", w, h);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f,
          "<text x=\"%.0f\" y=\"20\" font-family=\"sans-serif\" font-size=\"14\">dtensor demo: "
          "training loss per step (blue: %s mesh, orange dashed: 1 rank)</text>\n",
          m, label);
  fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", m, h - m,
          w - 10, h - m);
  fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", m, h - m,
          m, 30.0);
  fprintf(f, "<text x=\"4\" y=\"40\" font-size=\"11\">%.2f</text>\n", hi);
  fprintf(f, "<text x=\"4\" y=\"%.0f\" font-size=\"11\">0</text>\n", h - m);
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">step %d</text>\n", w - 80, h - m + 16,
          n);
  for (int c = 0; c < 2; c++) {
    const double *v = c == 0 ? a : b;
    if (!v) continue;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"",
            c == 0 ? "#1f77b4" : "#ff7f0e", c == 0 ? "" : " stroke-dasharray=\"4 3\"");
    for (int i = 0; i < n; i++) {
      double x = m + (w - 10 - m) * (n > 1 ? (double)i / (n - 1) : 0);
      double y = (h - m) - (h - m - 30) * (isfinite(v[i]) ? v[i] / hi : 0);
      fprintf(f, "%.1f,%.1f ", x, y);
    }
    fprintf(f, "\"/>\n");
  }
  fprintf(f, "</svg>\n");
  return dt__output_close(&out, f, false) ? -1 : 0;
}

static void print_header(const train_run *r) {
  printf("libdtensor %s: training a decoder-only transformer to reverse sequences\n",
         dt_version_string());
  printf("  vocab %d, d_model %d, %d heads, %d layers, MLP %d, seq %d, batch %d, AdamW lr 1e-2\n",
         VOCAB, DMODEL, HEADS, LAYERS, FFN, SEQ, BATCH);
  if (r->pp > 1) {
    printf("  mesh %d (dp) x %d (pp) x %d (tp), %d ranks: two pipeline stages (embeddings and "
           "block 1; block 2, norm and LM head),\n  1F1B over %d microbatches; inside each "
           "stage",
           r->dp, r->pp, r->tp, r->world, PP_MICROBATCHES);
  } else {
    printf("  mesh %d (dp) x %d (tp):", r->dp, r->tp);
  }
  printf(" batch Shard(0) on dp; q/k/v, MLP up and LM head colwise, "
         "attention out and MLP down rowwise on tp;\n  logits Shard(-1) into the "
         "vocabulary-parallel cross-entropy; dp gradients Partial(sum), reduced by the "
         "optimizer step\n\n");
  fflush(stdout);
}

/* --mesh dp=A,tp=B or dp=A,pp=P,tp=B (names in that order; pp 1 or 2, dp 1, 2 or 4, tp 1 or
 * 2: the model's 2 heads and 2 layers, the batch of 16). */
static bool parse_mesh(const char *s, train_run *r) {
  int dp = 0, pp = 1, tp = 0, used = 0;
  if (sscanf(s, "dp=%d,pp=%d,tp=%d%n", &dp, &pp, &tp, &used) == 3 && s[used] == '\0') {
  } else if (pp = 1, sscanf(s, "dp=%d,tp=%d%n", &dp, &tp, &used) == 2 && s[used] == '\0') {
  } else {
    return false;
  }
  if (!(dp == 1 || dp == 2 || dp == 4) || !(tp == 1 || tp == 2) || !(pp == 1 || pp == 2))
    return false;
  r->dp = dp;
  r->pp = pp;
  r->tp = tp;
  r->world = dp * pp * tp;
  return true;
}

static int fail(const char *what) {
  fprintf(stderr, "demo: %s failed: %s\n", what, dt_last_error());
  return 1;
}

static bool parse_count(const char *s, int *out) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (!end || *end != '\0' || v < 1 || v > MAX_STEPS) return false;
  *out = (int)v;
  return true;
}

int tool_demo_train(int argc, char **argv) {
  int steps = 300, log_every = 0;
  train_run mesh = {.world = 4, .dp = 2, .pp = 1, .tp = 2};
  bool use_mpi = false;
  const char *device = "cpu";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      if (!parse_count(argv[++i], &steps)) {
        fprintf(stderr, "demo: --steps must be in 1..%d, got '%s'\n", MAX_STEPS, argv[i]);
        return 2;
      }
    } else if (strcmp(argv[i], "--log-every") == 0 && i + 1 < argc) {
      if (!parse_count(argv[++i], &log_every)) {
        fprintf(stderr, "demo: --log-every must be in 1..%d, got '%s'\n", MAX_STEPS, argv[i]);
        return 2;
      }
    } else if (strcmp(argv[i], "--mesh") == 0 && i + 1 < argc) {
      if (!parse_mesh(argv[++i], &mesh)) {
        fprintf(stderr,
                "demo: --mesh is dp=A,tp=B or dp=A,pp=P,tp=B with dp 1, 2 or 4, pp 1 or "
                "2, tp 1 or 2; got '%s'\n",
                argv[i]);
        return 2;
      }
    } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      device = argv[++i];
      if (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0) {
        fprintf(stderr, "demo: --device is cpu or cuda, got '%s'\n", device);
        return 2;
      }
    } else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      const char *backend = argv[++i];
      if (strcmp(backend, "mpi") == 0) {
        use_mpi = true;
      } else if (strcmp(backend, "threads") != 0) {
        fprintf(stderr, "demo: unknown backend '%s' (threads or mpi)\n", backend);
        return 2;
      }
    } else {
      fprintf(stderr, "demo: unknown option '%s' (see 'dtensor demo --help')\n", argv[i]);
      return 2;
    }
  }
  if (log_every == 0) log_every = steps >= 100 ? 25 : 5;
  if (strcmp(device, "cpu") != 0 && mesh.pp > 1) {
    fprintf(stderr,
            "demo: --device %s with pipeline stages (pp=%d) is not supported: the "
            "pipeline's stage meshes are CPU meshes\n",
            device, mesh.pp);
    return 2;
  }
  const char *env = getenv("DT_BACKEND");
  if (env && strcmp(env, "mpi") == 0) use_mpi = true;

  double *losses = calloc((size_t)steps, sizeof *losses);
  double *reference = calloc((size_t)steps, sizeof *reference);
  if (!losses || !reference) {
    free(losses);
    free(reference);
    fprintf(stderr, "demo: out of memory\n");
    return 1;
  }
  dt_profiler *profiler = NULL;
  int rc = 0, my_rank = 0;
  if (dt_profiler_create(&profiler)) rc = fail("creating the profiler");
  train_run run = {.world = mesh.world,
                   .dp = mesh.dp,
                   .pp = mesh.pp,
                   .tp = mesh.tp,
                   .steps = steps,
                   .log_every = log_every,
                   .device = device,
                   .losses = losses};
  char label[32], ranks_text[32];
  if (run.pp > 1) {
    snprintf(label, sizeof label, "%dx%dx%d", run.dp, run.pp, run.tp);
  } else {
    snprintf(label, sizeof label, "%dx%d", run.dp, run.tp);
  }
  snprintf(ranks_text, sizeof ranks_text, "training on %d ranks", run.world);
  run.profiler = profiler;
  char trace_path[64] = "dtensor_demo_trace.json";
  run.trace_path = trace_path;
  if (!rc && use_mpi) {
    dt_comm *world = NULL;
    if (dt_comm_init(&(dt_comm_options){.backend = "mpi"}, &world)) {
      rc = fail("starting MPI");
    } else if (dt_comm_size(world) != run.world) {
      fprintf(stderr, "demo: under MPI the demo on %s needs %d ranks (mpirun -n %d), got %d\n",
              label, run.world, run.world, dt_comm_size(world));
      rc = 2;
    } else {
      my_rank = dt_comm_rank(world);
      run.quiet = my_rank != 0;
      run.process_per_rank = true;
      if (my_rank == 0) print_header(&run);
      snprintf(trace_path, sizeof trace_path, "dtensor_demo_trace.rank%d.json", my_rank);
      if (train_rank(world, &run)) rc = fail(ranks_text);
    }
    dt_comm_destroy(world);
  } else if (!rc) {
    print_header(&run);
    if (dt_comm_spawn(run.world, train_rank, &run)) rc = fail(ranks_text);
  }
  if (!rc && my_rank != 0) { /* under MPI, rank 0 checks and reports */
    if (dt_profiler_write_chrome_trace(profiler, trace_path)) rc = fail("writing the trace");
    dt_profiler_destroy(profiler);
    free(losses);
    free(reference);
    return rc;
  }
  /* The trace is complete: rank 0 wrote it at the last progress line. */
  dt_profiler_destroy(profiler);
  /* The reference: the same program on a 1 x 1 mesh in one thread. */
  train_run ref = {.world = 1,
                   .dp = 1,
                   .pp = 1,
                   .tp = 1,
                   .steps = steps,
                   .log_every = log_every,
                   .quiet = true,
                   .device = device,
                   .losses = reference};
  if (!rc && dt_comm_spawn(1, train_rank, &ref)) rc = fail("the 1-rank reference run");
  if (!rc) {
    double *scratch = malloc(sizeof *scratch * (size_t)steps);
    if (!scratch) {
      free(losses);
      free(reference);
      return fail("allocating the loss check");
    }
    loss_check check = check_losses(losses, reference, steps, scratch);
    free(scratch);
    bool tight_ok = check.tight_max <= LOSS_TOLERANCE;
    bool blocks_ok = check.median_max <= MEDIAN_TOLERANCE;
    printf("\n== Results\n");
    printf("  loss %.4f -> %.4f (uniform guess: %.4f) in %d steps, %.2f s on %d ranks, %.2f s "
           "on 1 rank\n",
           losses[0], losses[steps - 1], log((double)(VOCAB - 1)), steps, run.seconds, run.world,
           ref.seconds);
    printf("  max |loss(%s) - loss(1 rank)| over %s%d steps = %.3g (%s %.0e)\n", label,
           check.tight_steps < steps ? "the first " : "", check.tight_steps, check.tight_max,
           tight_ok ? "<=" : "EXCEEDS", LOSS_TOLERANCE);
    if (check.blocks > 0) {
      printf("  steps %d-%d in %d block(s) of %d+ steps: max |median(%s) - median(1 rank)| = "
             "%.3g (%s %.0e); single steps differ by up to %.3g there (float rounding "
             "amplified by the converged run; not a criterion)\n",
             check.tight_steps + 1, steps, check.blocks,
             steps - check.tight_steps < BLOCK_STEPS ? steps - check.tight_steps : BLOCK_STEPS,
             label, check.median_max, blocks_ok ? "<=" : "EXCEEDS", MEDIAN_TOLERANCE,
             check.step_max);
    }
    if (!check.finite) fprintf(stderr, "demo: a loss is not finite\n");
    printf("  collectives: %.1f KB per step on rank 0 (comm ledger)\n",
           (double)run.comm_bytes / steps / 1024);
    printf("%s", run.ledger);
    printf("  comm share of the step: %.1f %% (mean over ranks of the steps with a progress "
           "line, profiler)\n",
           100 * run.comm_share);
    printf("  trace: %s (the %d steps with a progress line; open in Perfetto or "
           "'dtensor trace stats')\n",
           trace_path, run.profiled_steps);
    const char *svg = "dtensor_demo_loss.svg";
    if (write_loss_svg(svg, label, losses, reference, steps) == 0) {
      printf("  loss curve: %s\n", svg);
    } else {
      fprintf(stderr, "demo: could not write %s\n", svg);
      rc = 1;
    }
    if (!tight_ok || !blocks_ok || !check.finite) rc = 1;
    /* A few steps of Adam may not lower the loss yet (it rises at step 3); from 20 on it must. */
    if (steps >= MIN_LEARNING_STEPS && !(losses[steps - 1] < losses[0])) {
      fprintf(stderr, "demo: the loss did not decrease in %d steps\n", steps);
      rc = 1;
    }
  }
  free(losses);
  free(reference);
  return rc;
}
