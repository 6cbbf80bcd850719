/*
 * dtensor demo tp — the TP-transform walkthrough: an MLP exported to a graph, rewritten for tensor
 * parallelism on N ranks (threads), and run both ways.
 *
 *   1. build Sequential(Linear(32, 128), ReLU, Linear(128, 32)) and export it by tracing;
 *   2. print its graph, then the graph rank 0 runs after the TP transformation with the plan
 *      {"0": COLWISE, "2": ROWWISE} (local shapes, placements, explicit communication);
 *   3. run the original on one rank and the transformed program on N ranks, print the largest
 *      difference, the communication each rank did (by kind and bytes) and how one weight is
 *      sharded.
 *
 * Options: --world N (default 4), --json (stdout: one JSON object, the summary; the
 * walkthrough on stderr).
 * `dtensor demo` alone trains a transformer (tools/demo_train.c).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "tools.h"

#define BATCH 8
#define IN 32
#define HIDDEN 128
#define DEMO_MAX_WORLD 64

typedef struct demo {
  const dt_program *prog;
  const dt_tensor *x, *expect;
  int world;
  double *max_diff;    /* per rank */
  dt_run_stats *stats; /* per rank */
  char *rank0_graph;   /* rank 0's transformed graph, for printing */
  char sharding[2048]; /* visualize_sharding of one weight (rank 0) */
  int inserted[5];     /* inserted node counts on rank 0, by comm kind (wait last) */
  int64_t ledger_calls[4], ledger_bytes[4]; /* the comm ledger's counts, summed over ranks */
  pthread_mutex_t lock;
} demo;

/* The comm kinds the transformation inserts, by the names the comm ledger counts. */
static const char *const ledger_names[4] = {"all_gather_uneven", "all_reduce",
                                            "reduce_scatter_uneven", "all_to_all"};

static const dt_tp_plan_entry plan_entries[] = {{"0", DT_TP_COLWISE}, {"2", DT_TP_ROWWISE}};

static double max_abs_diff(const dt_tensor *a, const dt_tensor *b) {
  int64_t n = dt_tensor_numel(a);
  if (n != dt_tensor_numel(b)) return INFINITY;
  double *x = malloc(sizeof *x * (size_t)n), *y = malloc(sizeof *y * (size_t)n), m = 0;
  if (!x || !y || dt_tensor_to_doubles(a, x, n) || dt_tensor_to_doubles(b, y, n)) m = INFINITY;
  for (int64_t i = 0; m != INFINITY && i < n; i++) m = fmax(m, fabs(x[i] - y[i]));
  free(x);
  free(y);
  return m;
}

static dt_status rank_main(dt_comm *world, void *arg) {
  demo *d = arg;
  int rank = dt_comm_rank(world);
  dt_tp_plan plan = {2, plan_entries};
  dt_program *tp = NULL;
  dt_mesh *mesh = NULL;
  dt_tensor *y = NULL, *shard = NULL;
  dt_status st = dt_parallel_tp_transform(d->prog, rank, d->world, &plan, &tp);
  dt_comm_ledger *ledger = NULL;
  if (!st) st = dt_comm_ledger_start(&ledger);
  if (!st) {
    dt_run_options ro = {.comm = world, .stats = &d->stats[rank]};
    st = dt_profiler_range_push("tp_forward");
    if (!st) st = dt_program_run(tp, 1, (dt_tensor *const *)&d->x, 1, &y, &ro);
    dt_profiler_range_pop();
  }
  if (ledger) {
    dt_comm_ledger_stop(ledger);
    pthread_mutex_lock(&d->lock);
    for (int k = 0; k < 4; k++) {
      d->ledger_calls[k] += dt_comm_ledger_count(ledger, ledger_names[k]);
      d->ledger_bytes[k] += dt_comm_ledger_bytes(ledger, ledger_names[k]);
    }
    pthread_mutex_unlock(&d->lock);
    dt_comm_ledger_destroy(ledger);
  }
  if (!st) d->max_diff[rank] = max_abs_diff(y, d->expect);
  /* The first weight as the distributed tensor its local shard is part of. */
  if (!st) st = dt_mesh_create(world, 1, (int[]){d->world}, (const char *const[]){"tp"}, &mesh);
  if (!st) {
    dt_dist_from_local_options fo = {.global_shape = (int64_t[]){HIDDEN, IN}, .global_ndim = 2};
    st = dt_dist_from_local(mesh, dt_program_state(tp, "0.weight"), 1,
                            (dt_placement[]){dt_shard(0)}, &fo, &shard);
  }
  if (!st && rank == 0) {
    st = dt_dist_visualize_sharding(shard, d->sharding, sizeof d->sharding);
    const dt_graph *g = dt_program_graph(tp);
    for (int k = 0; k < 4; k++) d->inserted[k] = dt_graph_count_target(g, dt_comm_node_name(k));
    d->inserted[4] = dt_graph_count_target(g, "wait_tensor");
    d->rank0_graph = dt_graph_to_string(g);
  }
  dt_tensor_release(shard);
  dt_tensor_release(y);
  dt_mesh_destroy(mesh);
  dt_program_destroy(tp);
  return st;
}

static int fail(const char *what) {
  fprintf(stderr, "demo: %s failed: %s\n", what, dt_last_error());
  return 1;
}

/* What each MPI process reports to rank 0. */
typedef struct rank_report {
  double max_diff, comm_seconds;
  int64_t calls[4], bytes[4];
} rank_report;

/* Under mpirun: this process is one rank; run it, then gather every rank's figures. */
static int run_mpi(demo *d, int *world_out, int *rank_out) {
  dt_comm_options o = {.backend = "mpi"};
  dt_comm *world = NULL;
  if (dt_comm_init(&o, &world)) return fail("starting MPI");
  int rank = dt_comm_rank(world), size = dt_comm_size(world);
  if (size > DEMO_MAX_WORLD) {
    dt_comm_destroy(world);
    fprintf(stderr, "demo: at most %d ranks\n", DEMO_MAX_WORLD);
    return 2;
  }
  d->world = size;
  int rc = 0;
  if (rank_main(world, d)) rc = fail("the tensor-parallel run");
  rank_report mine = {d->max_diff[rank], d->stats[rank].comm_seconds, {0}, {0}};
  memcpy(mine.calls, d->ledger_calls, sizeof mine.calls);
  memcpy(mine.bytes, d->ledger_bytes, sizeof mine.bytes);
  dt_objects *all = NULL;
  if (!rc && dt_comm_all_gather_object(world, &mine, sizeof mine, &all))
    rc = fail("gathering the figures");
  if (!rc) {
    memset(d->ledger_calls, 0, sizeof d->ledger_calls);
    memset(d->ledger_bytes, 0, sizeof d->ledger_bytes);
    for (int r = 0; r < all->count; r++) {
      rank_report rr;
      memcpy(&rr, all->data + all->offsets[r], sizeof rr);
      d->max_diff[r] = rr.max_diff;
      d->stats[r].comm_seconds = rr.comm_seconds;
      for (int k = 0; k < 4; k++)
        d->ledger_calls[k] += rr.calls[k], d->ledger_bytes[k] += rr.bytes[k];
    }
  }
  dt_free(all);
  dt_comm_destroy(world);
  *world_out = size;
  *rank_out = rank;
  return rc;
}

static int demo_tp(int argc, char **argv) {
  int world = 4;
  bool use_mpi = false;
  bool json = tool_has_flag(argc, argv, "--json");
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--world") == 0 && i + 1 < argc) {
      char *end = NULL;
      long w = strtol(argv[++i], &end, 10);
      world = end && *end == '\0' && w > 0 && w <= DEMO_MAX_WORLD ? (int)w : 0;
    } else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      const char *backend = argv[++i];
      if (strcmp(backend, "mpi") == 0) {
        use_mpi = true;
      } else if (strcmp(backend, "threads") != 0) {
        fprintf(stderr, "demo: unknown backend '%s' (threads or mpi)\n", backend);
        return 2;
      }
    } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      if (strcmp(argv[++i], "cpu") != 0) {
        /* Seed 003 on CUDA needs programs whose state lives on the device. */
        fprintf(stderr,
                "demo tp: --device %s is not supported: exported programs (dt_export, "
                "dt_program_run) hold their parameters in host memory; the collectives the TP "
                "transformation inserts (seed 003's counts) do not depend on the device\n",
                argv[i]);
        return 1;
      }
    } else if (strcmp(argv[i], "--json") != 0) {
      fprintf(stderr, "demo: unknown option '%s' (see 'dtensor demo --help')\n", argv[i]);
      return 2;
    }
  }
  if (world < 1 || world > DEMO_MAX_WORLD) {
    fprintf(stderr, "demo: --world must be in 1..%d\n", DEMO_MAX_WORLD);
    return 2;
  }
  dt_module *model = NULL;
  dt_program *prog = NULL;
  dt_tensor *x = NULL, *expect = NULL;
  int rc = 0;
  if (dt_nn_mlp(IN, HIDDEN, IN, true, true, 2024, &model)) return fail("building the model");
  if (dt_randn(2, (int64_t[]){BATCH, IN}, DT_F32, 7, &x)) rc = fail("making the input");
  dt_export_options eo = {.dynamic_batch = true};
  if (!rc && dt_export(model, x, &eo, &prog)) rc = fail("export");
  if (!rc && dt_program_run(prog, 1, &x, 1, &expect, NULL)) rc = fail("running the exported graph");
  demo d = {
      .prog = prog, .x = x, .expect = expect, .world = world, .lock = PTHREAD_MUTEX_INITIALIZER};
  dt_profiler *profiler = NULL;
  char trace_name[64] = "dtensor_demo_trace.json";
  const char *trace_path = trace_name;
  dt_trace_stats tstats = {0};
  bool traced = false;
  if (!rc && (dt_profiler_create(&profiler) || dt_profiler_start(profiler)))
    rc = fail("starting the profiler");
  d.max_diff = calloc(DEMO_MAX_WORLD, sizeof *d.max_diff);
  d.stats = calloc(DEMO_MAX_WORLD, sizeof *d.stats);
  if (!rc && (!d.max_diff || !d.stats)) rc = fail("allocation");
  int my_rank = 0;
  if (!rc && use_mpi) {
    rc = run_mpi(&d, &world, &my_rank);
  } else if (!rc && dt_comm_spawn(world, rank_main, &d)) {
    rc = fail("the tensor-parallel run");
  }
  if (profiler) dt_profiler_stop(profiler);
  if (use_mpi) snprintf(trace_name, sizeof trace_name, "dtensor_demo_trace.rank%d.json", my_rank);
  if (!rc) {
    dt_trace *trace = NULL;
    traced = !dt_profiler_write_chrome_trace(profiler, trace_path) &&
             !dt_trace_read_file(trace_path, &trace) &&
             !dt_trace_compute_stats(trace, "CPU", 0, &tstats);
    if (!traced) fprintf(stderr, "demo: no trace: %s\n", dt_last_error());
    dt_trace_destroy(trace);
  }
  dt_profiler_destroy(profiler);
  if (!rc && my_rank != 0) { /* under MPI only rank 0 reports */
    dt_program_destroy(prog);
    free(d.max_diff);
    free(d.stats);
    dt_tensor_release(x);
    dt_tensor_release(expect);
    dt_module_destroy(model);
    return 0;
  }
  if (!rc) {
    double diff = 0;
    for (int r = 0; r < world; r++) diff = fmax(diff, d.max_diff[r]);
    char *before = dt_graph_to_string(dt_program_graph(prog));
    /* With --json stdout carries the one JSON document alone (a program can parse it); the
     * walkthrough goes to stderr. */
    FILE *text = json ? stderr : stdout;
    fprintf(text, "libdtensor %s — tensor-parallel MLP on %d ranks (%s backend)\n\n",
            dt_version_string(), world, use_mpi ? "mpi" : "threads");
    fprintf(text,
            "== Model: Sequential(Linear(%d, %d), ReLU, Linear(%d, %d)), plan {\"0\": colwise, "
            "\"2\": rowwise}\n\n",
            IN, HIDDEN, HIDDEN, IN);
    fprintf(text, "== Exported graph (dt_export, batch symbolic as s0)\n%s\n",
            before ? before : "(out of memory)\n");
    fprintf(text,
            "== After the TP transformation, rank 0 of %d (local shapes, placements, explicit "
            "comm)\n%s\n",
            world, d.rank0_graph ? d.rank0_graph : "(out of memory)\n");
    fprintf(text, "== Results\n");
    fprintf(text, "  max |single rank - %d ranks| = %.3g  (%s 1e-5)\n", world, diff,
            diff <= 1e-5 ? "<=" : "EXCEEDS");
    fprintf(text,
            "  inserted per rank: %d all_gather_into_tensor, %d all_reduce, %d "
            "reduce_scatter_tensor, %d all_to_all, "
            "%d wait_tensor\n",
            d.inserted[0], d.inserted[1], d.inserted[2], d.inserted[3], d.inserted[4]);
    fprintf(text, "  communication by kind (comm ledger: calls / bytes, summed over ranks):\n");
    for (int k = 0; k < 4; k++) {
      fprintf(text, "    %-24s %4lld calls %10lld bytes\n", dt_comm_node_name(k),
              (long long)d.ledger_calls[k], (long long)d.ledger_bytes[k]);
    }
    double comm_s = 0;
    for (int r = 0; r < world; r++) comm_s += d.stats[r].comm_seconds;
    fprintf(text, "    time in collectives: %.3f ms (all ranks)\n\n", comm_s * 1e3);
    fprintf(text, "== visualize_sharding(0.weight) [%d, %d], placed S(0)\n%s\n", HIDDEN, IN,
            d.sharding);
    if (traced) {
      fprintf(text, "== Trace: %s (open in Perfetto or chrome://tracing)\n", trace_path);
      fprintf(
          text,
          "  %lld events on %d ranks; busy %.1f us of %.1f us: utilization %.1f %%, matrix %.1f "
          "%%, "
          "comm %.1f %%\n\n",
          (long long)tstats.events, tstats.processes, tstats.busy_us, tstats.total_us,
          100 * tstats.utilization, 100 * tstats.mm_fraction, 100 * tstats.comm_fraction);
    }
    if (json) {
      printf("{\"world\":%d,\"max_abs_diff\":%.9g,\"all_reduce\":%d,\"all_gather_into_tensor\":%d,"
             "\"reduce_scatter_tensor\":%d,\"all_to_all\":%d,\"all_reduce_bytes\":%lld,"
             "\"all_gather_into_tensor_bytes\":%lld,\"utilization\":%.4f,\"mm_fraction\":%.4f,"
             "\"trace\":%s%s%s}\n",
             world, diff, d.inserted[1], d.inserted[0], d.inserted[2], d.inserted[3],
             (long long)d.ledger_bytes[1], (long long)d.ledger_bytes[0], tstats.utilization,
             tstats.mm_fraction, traced ? "\"" : "", traced ? trace_path : "null",
             traced ? "\"" : "");
    }
    dt_free(before);
    if (diff > 1e-5) rc = 1;
  }
  dt_free(d.rank0_graph);
  free(d.max_diff);
  free(d.stats);
  dt_tensor_release(x);
  dt_tensor_release(expect);
  dt_program_destroy(prog);
  dt_module_destroy(model);
  return rc;
}

/* `dtensor demo tp ...` is the TP-transform walkthrough; anything else trains. */
int tool_demo(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "tp") == 0) return demo_tp(argc - 1, argv + 1);
  return tool_demo_train(argc, argv);
}
