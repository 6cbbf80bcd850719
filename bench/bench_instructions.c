/*
 * dtensor bench instructions: user-space instructions of one distributed op dispatch,
 * counted under valgrind's callgrind, as PyTorch's PR-time DTensor benchmarks count them.
 *
 * Setup (as PyTorch's): fake backend, world 256, a 1-D mesh named "dp", 10x10 float32
 * tensors made with from_local and Replicate. The 2-D rows use a 16x16 mesh over the same
 * world and [S(0), S(1)] / [S(1), S(0)] tensors; a "_miss" row clears the sharding cache
 * (uncounted) before each iteration, so miss - hit is what propagation adds. Each case is warmed up
 * once, then measured over 5 iterations (zeroed counters, collection toggled on around the
 * iteration, a dump per iteration); the reported value is the minimum. The benchmark runs itself
 * under valgrind and reads the dumps back.
 *
 * Output: CSV rows `name,instruction_count,value` appended to a results file (--results,
 * default bench/results.csv is not touched unless given) and, with --json, JSON lines.
 * --device cuda: seed 001 as its authors ran it, the meshes "cuda" (the fake backend takes
 * CUDA tensors: it moves nothing) and the 10x10 tensors on cuda:0; refused without a GPU.
 * --time: no valgrind; each case's median ns per call, JSON lines (the seed's "time").
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

#include "dtensor/dtensor.h"
#include "bench_callgrind.h"
#include "bench_machine.h"
#include "bench_util.h"
#include "profile/output_file.h"
#include "tools.h"

#define ITERATIONS 5
#define WORLD 256

typedef struct bench_state {
  dt_mesh *mesh;
  dt_tensor *local_a, *local_b;
  dt_tensor *a, *b;                  /* Replicate over "dp" */
  dt_tensor *partial;                /* Partial(sum) over "dp" */
  dt_mesh *mesh_2d;                  /* 16 x 16 ("dp", "tp") over the same world */
  dt_tensor *a_2d, *b_2d;            /* [S(0), S(1)] and [S(1), S(0)] on mesh_2d */
  dt_tensor *x_2d, *w_2d;            /* [R, S(1)] both: linear gives Partial(sum) on "tp" */
  dt_tensor *grad_a, *grad_b, *seed; /* add_backward's: made by its first call */
} bench_state;

typedef dt_status (*case_fn)(bench_state *s);

static dt_status case_detach(bench_state *s) {
  dt_tensor *o = NULL;
  dt_status st = dt_detach(s->a, &o);
  dt_tensor_release(o);
  return st;
}

static dt_status case_view(bench_state *s) {
  dt_tensor *o = NULL;
  dt_status st = dt_view(s->a, 1, (int64_t[]){100}, &o);
  dt_tensor_release(o);
  return st;
}

static dt_status case_inplace(bench_state *s) { return dt_add_(s->a, s->b); }

static dt_status case_to_from_local(bench_state *s) {
  dt_tensor *d = NULL, *l = NULL;
  dt_status st =
      dt_dist_from_local(s->mesh, s->local_a, 1, (dt_placement[]){dt_replicate()}, NULL, &d);
  if (!st) st = dt_dist_to_local(d, &l);
  dt_tensor_release(l);
  dt_tensor_release(d);
  return st;
}

/* Redistributes `from` to each placement of seq in turn (one collective or local step each). */
static dt_status redistribute_chain(const dt_tensor *from, int n, const dt_placement *seq) {
  dt_tensor *cur = dt_tensor_retain((dt_tensor *)from);
  dt_status st = DT_OK;
  for (int i = 0; i < n && !st; i++) {
    dt_tensor *next = NULL;
    st = dt_dist_redistribute(cur, 1, &seq[i], &next);
    dt_tensor_release(cur);
    cur = next;
  }
  dt_tensor_release(cur);
  return st;
}

/* PyTorch's sequence: R -> S(0) -> S(1) -> R on one tensor, then P -> R and P -> S(0) on a
 * Partial(sum) one, so the figure compares with PyTorch's for the same work. */
static dt_status case_collectives(bench_state *s) {
  dt_placement seq[3] = {dt_shard(0), dt_shard(1), dt_replicate()};
  dt_status st = redistribute_chain(s->a, 3, seq);
  if (!st) st = redistribute_chain(s->partial, 1, (dt_placement[]){dt_replicate()});
  if (!st) st = redistribute_chain(s->partial, 1, (dt_placement[]){dt_shard(0)});
  return st;
}

/* Our earlier sequence, kept as a second row: R -> S(0) -> R -> S(1) -> S(0) -> R. */
static dt_status case_collectives_chain(bench_state *s) {
  dt_placement seq[5] = {dt_shard(0), dt_replicate(), dt_shard(1), dt_shard(0), dt_replicate()};
  return redistribute_chain(s->a, 5, seq);
}

static dt_status case_random(bench_state *s) { return dt_uniform_(s->a, 0, 1, 1234); }

static dt_status case_custom_handler(bench_state *s) {
  bool same;
  return dt_is_same_size(s->a, s->b, &same);
}

/* Forward add of two distributed tensors that require grad, then its backward (seeded with
 * a Replicate ones: the output is not a scalar), as PyTorch's add-backward benchmark. The
 * tensors requiring grad are made at the first (warm-up) call, not in the setup: while any
 * tensor carries autograd state every dispatch takes autograd's path, and the other rows
 * measure dispatch without autograd. So this row comes last. The gradients are dropped after
 * each backward so that every iteration does the same work. */
static dt_status case_add_backward(bench_state *s) {
  dt_status st = DT_OK;
  if (!s->grad_a) {
    st = dt_detach(s->a, &s->grad_a);
    if (!st) st = dt_detach(s->b, &s->grad_b);
    if (!st) {
      st = dt_dist_ones(s->mesh, 2, (int64_t[]){10, 10}, DT_F32, 1,
                        (dt_placement[]){dt_replicate()}, &s->seed);
    }
    if (!st) st = dt_tensor_set_requires_grad(s->grad_a, true);
    if (!st) st = dt_tensor_set_requires_grad(s->grad_b, true);
    if (st) return st;
  }
  dt_tensor *y = NULL;
  st = dt_add(s->grad_a, s->grad_b, &y);
  if (!st) st = dt_backward(y, s->seed);
  dt_tensor_release(y);
  if (!st) st = dt_tensor_zero_grad(s->grad_a, true);
  if (!st) st = dt_tensor_zero_grad(s->grad_b, true);
  return st;
}

/* add of two tensors sharded on both dims of a 2-D mesh, [S(0), S(1)] + [S(0), S(1)]:
 * nothing moves. */
static dt_status case_add_2d(bench_state *s) {
  dt_tensor *o = NULL;
  dt_status st = dt_add(s->a_2d, s->a_2d, &o);
  dt_tensor_release(o);
  return st;
}

/* [S(0), S(1)] + [S(1), S(0)]: one argument changes on both mesh dims, so the propagator
 * also prices it with the planner's search; the chosen redistribution runs (fake backend). */
static dt_status case_add_2d_mixed(bench_state *s) {
  dt_tensor *o = NULL;
  dt_status st = dt_add(s->a_2d, s->b_2d, &o);
  dt_tensor_release(o);
  return st;
}

/* linear(x, w), both [R, S(1)]: a local matmul and a Partial(sum) result on "tp". */
static dt_status case_linear_2d(bench_state *s) {
  dt_tensor *o = NULL;
  dt_status st = dt_linear(s->x_2d, s->w_2d, NULL, &o);
  dt_tensor_release(o);
  return st;
}

typedef struct bench_case {
  const char *name;
  case_fn fn;
  long pytorch; /* PyTorch's expected_results.csv figure for the same work; 0: none */
  long target;
  bool miss; /* each iteration starts from a cleared sharding cache (cleared uncounted) */
} bench_case;

static const bench_case cases[] = {
    {"dtensor_dispatch_detach", case_detach, 57510, 600, false},
    {"dtensor_dispatch_view", case_view, 66300, 1500, false},
    {"dtensor_dispatch_inplace", case_inplace, 57750, 1000, false},
    {"dtensor_dispatch_to_from_local", case_to_from_local, 226900, 3000, false},
    {"dtensor_dispatch_collectives", case_collectives, 29010000, 47084, false},
    {"dtensor_dispatch_collectives_chain", case_collectives_chain, 0, 60000, false},
    {"dtensor_dispatch_random", case_random, 592800, 4000, false},
    {"dtensor_dispatch_custom_handler", case_custom_handler, 36120, 300, false},
    {"dtensor_dispatch_2d_add_hit", case_add_2d, 0, 1500, false},
    {"dtensor_dispatch_2d_add_miss", case_add_2d, 0, 25000, true},
    {"dtensor_dispatch_2d_add_mixed_hit", case_add_2d_mixed, 0, 125000, false},
    {"dtensor_dispatch_2d_add_mixed_miss", case_add_2d_mixed, 0, 140000, true},
    {"dtensor_dispatch_2d_linear_hit", case_linear_2d, 0, 3912, false},
    {"dtensor_dispatch_2d_linear_miss", case_linear_2d, 0, 16000, true},
    {"dtensor_dispatch_add_backward", case_add_backward, 356500, 5000, false}, /* last: see above */
};
#define N_CASES (int)(sizeof cases / sizeof *cases)

/* The local tensors on the mesh's device (seed 001: device "cuda"). */
static dt_status on_device(const dt_mesh *mesh, dt_tensor **t) {
  dt_device device = dt_mesh_device(mesh);
  if (device.kind == DT_DEVICE_CPU) return DT_OK;
  dt_tensor *moved = NULL;
  dt_status st = dt_to_device(*t, device, &moved);
  dt_tensor_release(*t);
  *t = moved;
  return st;
}

/* Nanoseconds per call of each case, without valgrind: the median of 200 calls (miss cases:
 * 50, each after a cache clear that is not timed), as JSON lines. */
static int time_cases(bench_state *s, const char *device) {
  enum { CALLS = 200, MISS_CALLS = 50 };
  double ns[CALLS];
  for (int c = 0; c < N_CASES; c++) {
    if (cases[c].fn(s)) {
      fprintf(stderr, "bench instructions: %s failed: %s\n", cases[c].name, dt_last_error());
      return 1;
    }
    int n = cases[c].miss ? MISS_CALLS : CALLS;
    for (int i = 0; i < n; i++) {
      if (cases[c].miss) dt_dist_sharding_cache_clear();
      double t0 = bench_now_us();
      dt_status st = cases[c].fn(s);
      ns[i] = (bench_now_us() - t0) * 1e3;
      if (st) {
        fprintf(stderr, "bench instructions: %s failed: %s\n", cases[c].name, dt_last_error());
        return 1;
      }
    }
    printf("{\"name\":\"%s\",\"metric\":\"time_ns\",\"value\":%.0f,\"device\":\"%s\","
           "\"calls\":%d}\n",
           cases[c].name, bench_median(ns, n), device, n);
  }
  return 0;
}

/* The measured side, running under valgrind (or timed: --time). */
static int run_child(const char *device, bool timing) {
  dt_comm_options opts = {.backend = "fake", .rank = 0, .world_size = WORLD};
  dt_comm *world = NULL;
  bench_state s = {0};
  if (dt_comm_init(&opts, &world) ||
      dt_mesh_create_on(device, world, 1, (int[]){WORLD}, (const char *[]){"dp"}, &s.mesh) ||
      dt_rand(2, (int64_t[]){10, 10}, DT_F32, 1, &s.local_a) ||
      dt_rand(2, (int64_t[]){10, 10}, DT_F32, 2, &s.local_b) || on_device(s.mesh, &s.local_a) ||
      on_device(s.mesh, &s.local_b) ||
      dt_dist_from_local(s.mesh, s.local_a, 1, (dt_placement[]){dt_replicate()}, NULL, &s.a) ||
      dt_dist_from_local(s.mesh, s.local_b, 1, (dt_placement[]){dt_replicate()}, NULL, &s.b) ||
      dt_dist_from_local(s.mesh, s.local_b, 1, (dt_placement[]){dt_partial(DT_REDUCE_SUM)}, NULL,
                         &s.partial) ||
      dt_mesh_create_on(device, world, 2, (int[]){16, WORLD / 16}, (const char *[]){"dp", "tp"},
                        &s.mesh_2d) ||
      dt_dist_from_local(s.mesh_2d, s.local_a, 2, (dt_placement[]){dt_shard(0), dt_shard(1)}, NULL,
                         &s.a_2d) ||
      dt_dist_from_local(s.mesh_2d, s.local_b, 2, (dt_placement[]){dt_shard(1), dt_shard(0)}, NULL,
                         &s.b_2d) ||
      dt_dist_from_local(s.mesh_2d, s.local_a, 2, (dt_placement[]){dt_replicate(), dt_shard(1)},
                         NULL, &s.x_2d) ||
      dt_dist_from_local(s.mesh_2d, s.local_b, 2, (dt_placement[]){dt_replicate(), dt_shard(1)},
                         NULL, &s.w_2d)) {
    fprintf(stderr, "bench instructions: setup failed: %s\n", dt_last_error());
    return 1;
  }
  /* DT_BENCH_PROFILE=1 keeps collection on throughout (run under valgrind by hand with
   * --collect-atstart=yes): the dumps then attribute costs to functions for
   * callgrind_annotate, at the price of counting the client requests too. */
  bool toggle = !getenv("DT_BENCH_PROFILE");
  int rc = timing ? time_cases(&s, device) : 0;
  for (int c = 0; c < N_CASES && !rc && !timing; c++) {
    if (cases[c].fn(&s)) rc = 1; /* warm-up: caches, pools */
    for (int i = 0; i < ITERATIONS && !rc; i++) {
      if (cases[c].miss) dt_dist_sharding_cache_clear();
      CALLGRIND_ZERO_STATS;
      if (toggle) CALLGRIND_TOGGLE_COLLECT;
      dt_status st = cases[c].fn(&s);
      if (toggle) CALLGRIND_TOGGLE_COLLECT;
      CALLGRIND_DUMP_STATS_AT(cases[c].name);
      if (st) rc = 1;
    }
    if (rc) fprintf(stderr, "bench instructions: %s failed: %s\n", cases[c].name, dt_last_error());
  }
  dt_tensor_release(s.a);
  dt_tensor_release(s.b);
  dt_tensor_release(s.partial);
  dt_tensor_release(s.a_2d);
  dt_tensor_release(s.b_2d);
  dt_tensor_release(s.x_2d);
  dt_tensor_release(s.w_2d);
  dt_mesh_destroy(s.mesh_2d);
  dt_tensor_release(s.grad_a);
  dt_tensor_release(s.grad_b);
  dt_tensor_release(s.seed);
  dt_tensor_release(s.local_a);
  dt_tensor_release(s.local_b);
  dt_mesh_destroy(s.mesh);
  dt_comm_destroy(world);
  return rc;
}

/* Keeps the smallest total of each case's dumps (best[c], -1 when none). */
static void keep_best(const char *label, long total, void *user) {
  long *best = user;
  for (int c = 0; c < N_CASES; c++) {
    if (strcmp(label, cases[c].name) == 0 && (best[c] < 0 || total < best[c])) best[c] = total;
  }
}

/* Appends `text` to the --results file as one whole new file (dt__output_open: never through a
 * link, never half written): the old lines are read back, then the new ones added. A link at
 * the name is replaced, not appended to. 0, or -1 with errno set. */
static int append_results(const char *path, const char *text, size_t length) {
  char *old = NULL;
  size_t old_length = 0;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    old = malloc((size_t)st.st_size);
    ssize_t got = 0;
    while (old && old_length < (size_t)st.st_size &&
           (got = read(fd, old + old_length, (size_t)st.st_size - old_length)) > 0)
      old_length += (size_t)got;
    if (!old || got < 0) {
      int err = old ? errno : ENOMEM;
      free(old);
      close(fd);
      errno = err;
      return -1;
    }
  }
  if (fd >= 0) close(fd);
  dt__output_file out;
  FILE *f = dt__output_open(&out, path);
  if (!f) {
    free(old);
    return -1;
  }
  bool failed = fwrite(old ? old : "", 1, old_length, f) != old_length ||
                fwrite(text, 1, length, f) != length;
  free(old);
  int err = dt__output_close(&out, f, failed);
  errno = err;
  return err ? -1 : 0;
}

int bench_suite_instructions(int argc, char **argv) {
  const char *device = "cpu";
  for (int i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], "--device") == 0) device = argv[i + 1];
  }
  if (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0) {
    fprintf(stderr, "bench instructions: --device is cpu or cuda, got '%s'\n", device);
    return 2;
  }
  if (tool_has_flag(argc, argv, "--child")) return run_child(device, false);
  bool json = tool_has_flag(argc, argv, "--json");
  bench_machine_print(json);
  if (tool_has_flag(argc, argv, "--time")) return run_child(device, true);
  const char *results = NULL;
  for (int i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], "--results") == 0) results = argv[i + 1];
  }
  bench_callgrind_dir dir = {{0}};
  const char *args[] = {"bench", "instructions", "--child", "--device", device, NULL};
  long best[N_CASES];
  for (int c = 0; c < N_CASES; c++) best[c] = -1;
  int rc = bench_callgrind_run("bench instructions", args, &dir);
  if (!rc) rc = bench_callgrind_each(&dir, keep_best, best);
  char csv[N_CASES * 96] = "";
  size_t csv_length = 0;
  for (int c = 0; c < N_CASES && !rc; c++) {
    if (best[c] < 0) {
      fprintf(stderr, "bench instructions: no count for %s\n", cases[c].name);
      rc = 1;
      break;
    }
    double ratio = cases[c].pytorch ? (double)cases[c].pytorch / (double)best[c] : 0;
    if (json) {
      printf("{\"name\":\"%s\",\"metric\":\"instruction_count\",\"value\":%ld,\"pytorch\":%ld,"
             "\"target\":%ld,\"ratio_vs_pytorch\":%.1f}\n",
             cases[c].name, best[c], cases[c].pytorch, cases[c].target, ratio);
    } else if (cases[c].pytorch) {
      printf("%-34s %9ld instructions (PyTorch %ld, %.0fx fewer; target <= %ld)\n", cases[c].name,
             best[c], cases[c].pytorch, ratio, cases[c].target);
    } else {
      printf("%-34s %9ld instructions (no PyTorch case does this; target <= %ld)\n", cases[c].name,
             best[c], cases[c].target);
    }
    int k = snprintf(csv + csv_length, sizeof csv - csv_length, "%s,instruction_count,%ld\n",
                     cases[c].name, best[c]);
    if (k > 0 && (size_t)k < sizeof csv - csv_length) csv_length += (size_t)k;
  }
  if (!rc && results && append_results(results, csv, csv_length)) {
    fprintf(stderr, "bench instructions: cannot append to --results %s: %s\n", results,
            strerror(errno));
    rc = 1;
  }
  bench_callgrind_clean(&dir);
  return rc;
}
