/*
 * dtensor bench dispatch: the time to dispatch one distributed op, as PyTorch's
 * test_dtensor_dispatch_overhead measures it. World 4 (threads backend), a 512x512 rand
 * tensor distributed Shard(0); each op runs under a timing dispatch mode that runs it 10
 * times and times each run:
 *   miss_us   a run right after dt_dist_sharding_cache_clear() (sharding propagation included):
 *             the median of MISS_ROUNDS such runs (the first timed run, then MISS_ROUNDS - 1
 *             more, each followed by a hit); miss_min_us, miss_max_us their spread
 *   miss_minus_hit_us  the median over those rounds of (miss - the hit right after it)
 *   hit_us    the median of the other 9 runs (cache hits)
 *   local_us  the same op on the local shards alone (no distributed dispatch), median of 9
 *             runs interleaved with the hits (hit, local, hit, local, ...) so that load from
 *             other processes on a shared machine hits both sides alike
 *   overhead_us = hit_us - local_us
 *   hit_min_us, hit_max_us, local_min_us, local_max_us: the spread of the two sides
 * Every rank's figures are gathered with all_gather_object; rank 0 prints one JSON line per
 * rank and op, then the median over ranks. Each line names its mesh ("mesh":[4]).
 * With an even world of at least 4 the same measure follows on a 2-D mesh (2 x world/2,
 * "mesh":[2,2] for world 4), 128x128 tensors, placements that make the propagator decide
 * both mesh dims (see run_2d). The ranks meet at a barrier before each op's timed runs.
 * --device cuda: the meshes are CUDA meshes (rank r on cuda:(r mod count), seed 000's
 * init_device_mesh("cuda")); the times are the host's, as the seed's are (ops queue their
 * kernels and return); refused without a CUDA device (dt_mesh_create_on's message).
 * The 2-D rows then run once more on the fake backend (rank 0 of the same world in this
 * thread, "backend":"fake"): collectives are local copies there, no peer is waited for, so
 * miss - hit is what propagation and planning add, also for the ops that communicate, whose
 * threads-backend miss - hit is mostly peers waking each other on a shared machine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_machine.h"
#include "bench_util.h"
#include "kernels/cpu/blas.h"
#include "dtensor/dtensor.h"
#include "tools.h"

#define RUNS 10
#define MISS_ROUNDS 11 /* cold-cache runs per op, each followed by a hit */

typedef dt_status (*op_fn)(dt_tensor **in, dt_mesh *mesh, dt_tensor **out);

typedef struct timing_mode {
  double us[RUNS];
  double local_us[RUNS - 1]; /* the local op, run after each hit */
  op_fn fn;                  /* the local baseline: fn(local, mesh) */
  dt_tensor **local;
  dt_mesh *mesh;
  bool local_done; /* the baseline runs beside the first op the call dispatches */
} timing_mode;

/* The timing mode: runs the op RUNS times, timing each; after every hit (run 1 on) it runs
 * the local baseline once, so the two sides alternate. Ops called from inside the callback
 * are not seen by this mode, so the baseline is not timed twice. */
static dt_status time_runs(dt_invocation *inv, void *user) {
  timing_mode *t = user;
  bool with_local = !t->local_done && t->local;
  t->local_done = true;
  dt_status st = DT_OK;
  for (int i = 0; i < RUNS && !st; i++) {
    double t0 = bench_now_us();
    st = dt_invocation_run(inv);
    t->us[i] = bench_now_us() - t0;
    if (st || i == 0 || !with_local) continue;
    dt_tensor *out = NULL;
    t0 = bench_now_us();
    st = t->fn(t->local, t->mesh, &out);
    t->local_us[i - 1] = bench_now_us() - t0;
    dt_tensor_release(out);
  }
  return st;
}

typedef struct op_inputs {
  dt_tensor *dist[2];  /* distributed arguments */
  dt_tensor *local[2]; /* their shards */
  dt_mesh *mesh;
} op_inputs;

static dt_status op_add(dt_tensor **in, dt_mesh *mesh, dt_tensor **out) {
  (void)mesh;
  return dt_add(in[0], in[0], out);
}
static dt_status op_detach(dt_tensor **in, dt_mesh *mesh, dt_tensor **out) {
  (void)mesh;
  return dt_detach(in[0], out);
}
static dt_status op_view(dt_tensor **in, dt_mesh *mesh, dt_tensor **out) {
  (void)mesh;
  /* a [128, 512] shard (or the whole [512, 512]) viewed as [-1, 256, 2] */
  return dt_view(in[0], 3, (int64_t[]){-1, 256, 2}, out);
}
static dt_status op_linear(dt_tensor **in, dt_mesh *mesh, dt_tensor **out) {
  (void)mesh;
  return dt_linear(in[0], in[1], NULL, out);
}
static dt_status op_embedding(dt_tensor **in, dt_mesh *mesh, dt_tensor **out) {
  (void)mesh;
  return dt_embedding(in[1], in[0], out);
}
static dt_status op_add2(dt_tensor **in, dt_mesh *mesh, dt_tensor **out) {
  (void)mesh;
  return dt_add(in[0], in[1], out);
}
static dt_status op_mm(dt_tensor **in, dt_mesh *mesh, dt_tensor **out) {
  (void)mesh;
  return dt_mm(in[0], in[1], out);
}
static dt_status op_sum(dt_tensor **in, dt_mesh *mesh, dt_tensor **out) {
  (void)mesh;
  return dt_sum(in[0], out);
}
static dt_status op_softmax(dt_tensor **in, dt_mesh *mesh, dt_tensor **out) {
  (void)mesh;
  return dt_softmax(in[0], 1, out);
}

typedef struct bench_op {
  const char *name;
  op_fn fn;
} bench_op;

/* Each rank's figures for one op. */
typedef struct figures {
  double miss_us, hit_us, local_us;
  double plan_us; /* redistribute only: planning alone, no communication */
  /* Over MISS_ROUNDS (miss, hit) pairs: the median of miss - hit, and the misses' spread. */
  double miss_hit_us, miss_min_us, miss_max_us;
  double hit_min_us, hit_max_us, local_min_us, local_max_us;
} figures;

typedef struct bench_args {
  bool json;
  int world;
  const char *backend; /* of the rows being printed: "threads" or "fake" */
  const char *device;  /* the meshes' device kind: "cpu" or "cuda" (--device) */
} bench_args;

static double median_of(double *v, int n) { return bench_median(v, n); }

/* Median and spread of the hits (samples[1..RUNS-1]) and of the local runs. */
static void summarize(figures *f, double *hits, double *local) {
  bench_stats h = bench_stats_of(hits, RUNS - 1), l = bench_stats_of(local, RUNS - 1);
  f->hit_us = h.median, f->hit_min_us = h.min, f->hit_max_us = h.max;
  f->local_us = l.median, f->local_min_us = l.min, f->local_max_us = l.max;
}

/* Times fn on distributed inputs under the mode, with fn on the local inputs interleaved. */
static dt_status measure(dt_comm *world, dt_tensor **dist, dt_tensor **local, dt_mesh *mesh,
                         op_fn fn, figures *f) {
  timing_mode t = {.fn = fn, .local = local, .mesh = mesh};
  dt_tensor *out = NULL;
  /* Warm up both sides (first-touch page faults, allocator caches), then measure a cold plan
   * cache. */
  dt_status warm = fn(dist, mesh, &out);
  dt_tensor_release(out);
  out = NULL;
  if (!warm) warm = fn(local, mesh, &out);
  dt_tensor_release(out);
  out = NULL;
  if (warm) return warm;
  /* Line the ranks up, so that an op that communicates does not time a late peer in its miss. */
  dt_status st = dt_comm_barrier(world);
  if (st) return st;
  dt_dist_sharding_cache_clear();
  st = dt_mode_push(time_runs, &t);
  if (st) return st;
  st = fn(dist, mesh, &out);
  dt_mode_pop();
  dt_tensor_release(out);
  if (st) return st;
  summarize(f, t.us + 1, t.local_us);
  /* More misses, each from a cleared cache and followed by a hit (miss, hit, miss, hit, ...):
   * one cold run is too noisy a figure on a loaded machine. */
  double miss[MISS_ROUNDS], diff[MISS_ROUNDS];
  miss[0] = t.us[0], diff[0] = t.us[0] - t.us[1];
  for (int r = 1; r < MISS_ROUNDS && !st; r++) {
    st = dt_comm_barrier(world);
    dt_dist_sharding_cache_clear();
    double t0 = bench_now_us();
    if (!st) st = fn(dist, mesh, &out);
    miss[r] = bench_now_us() - t0;
    dt_tensor_release(out);
    out = NULL;
    t0 = bench_now_us();
    if (!st) st = fn(dist, mesh, &out);
    diff[r] = miss[r] - (bench_now_us() - t0);
    dt_tensor_release(out);
    out = NULL;
  }
  bench_stats m = bench_stats_of(miss, MISS_ROUNDS);
  f->miss_us = m.median, f->miss_min_us = m.min, f->miss_max_us = m.max;
  f->miss_hit_us = bench_median(diff, MISS_ROUNDS);
  return st;
}

static void print(const bench_args *b, const char *name, const char *mesh, int rank,
                  const figures *f) {
  char who[32] = "";
  if (rank >= 0) snprintf(who, sizeof who, "\"rank\":%d,", rank);
  if (b->json) {
    char plan[48] = "";
    if (f->plan_us > 0) snprintf(plan, sizeof plan, ",\"plan_us\":%.3f", f->plan_us);
    printf(
        "{\"name\":\"%s\",\"backend\":\"%s\",\"device\":\"%s\",\"world\":%d,\"mesh\":%s,%s\"miss_"
        "us\":%.3f,\"hit_"
        "us\":%.3f,\"local_"
        "us\":%.3f,"
        "\"overhead_us\":%.3f,\"miss_minus_hit_us\":%.3f,\"hit_min_us\":%.3f,"
        "\"hit_max_us\":%.3f,\"local_min_us\":%.3f,\"local_max_us\":%.3f,\"miss_min_us\":%.3f,"
        "\"miss_max_us\":%.3f%s}\n",
        name, b->backend, b->device, b->world, mesh, who, f->miss_us, f->hit_us, f->local_us,
        f->hit_us - f->local_us, f->miss_hit_us, f->hit_min_us, f->hit_max_us, f->local_min_us,
        f->local_max_us, f->miss_min_us, f->miss_max_us, plan);
  } else {
    char label[24] = "median";
    if (rank >= 0)
      snprintf(label, sizeof label, "%s %d", b->backend[0] == 'f' ? "fake" : "rank", rank);
    printf("%-40s %-5s %-8s miss %8.2f us  hit %7.2f us (%.2f..%.2f)  local %7.2f us (%.2f..%.2f)  "
           "overhead %6.2f us",
           name, mesh, label, f->miss_us, f->hit_us, f->hit_min_us, f->hit_max_us, f->local_us,
           f->local_min_us, f->local_max_us, f->hit_us - f->local_us);
    if (f->plan_us > 0) printf("  plan %5.2f us", f->plan_us);
    printf("\n");
  }
}

#define MAX_ROWS 16
/* Worlds up to DT_COMM_MAX_THREADS run on threads (then on the fake backend too); larger ones
 * on the fake backend alone. */
#define DT_BENCH_MAX_WORLD 4096

/* The 2-D rows, when the world is even and at least 4: a 2 x world/2 mesh ("dp", "tp"),
 * 128x128 tensors (small, so that what a miss adds is not lost in the kernels' noise) with
 * placements that make the propagator decide both mesh dims: an elementwise op on two
 * shards, one whose second argument changes on both mesh dims (the propagator prices it
 * with the planner's search), mm and linear producing a shard and a Partial(sum), a full
 * reduction and a softmax over a sharded dim. Fills mine and names; *n is the row count. */
static dt_status run_2d(dt_comm *world, const char *device, figures *mine, const char **names,
                        int *n) {
  int size = dt_comm_size(world);
  *n = 0;
  if (size < 4 || size % 2) return DT_OK;
  dt_mesh *mesh = NULL;
  dt_status st = dt_mesh_create_on(device, world, 2, (int[]){2, size / 2},
                                   (const char *[]){"dp", "tp"}, &mesh);
  if (st) return st;
  enum { X_SS, X_SS_T, X_SR, W_RR, X_RS, W_RS, N_T };
  const dt_placement pl[N_T][2] = {
      {dt_shard(0), dt_shard(1)},    {dt_shard(1), dt_shard(0)},
      {dt_shard(0), dt_replicate()}, {dt_replicate(), dt_replicate()},
      {dt_replicate(), dt_shard(1)}, {dt_replicate(), dt_shard(1)},
  };
  dt_tensor *d[N_T] = {0}, *l[N_T] = {0};
  for (int i = 0; i < N_T && !st; i++) {
    st = dt_dist_rand(mesh, 2, (int64_t[]){128, 128}, DT_F32, (uint64_t)(10 + i), 2, pl[i], &d[i]);
    if (!st) st = dt_dist_to_local(d[i], &l[i]);
  }
  static const struct {
    const char *name;
    op_fn fn;
    int a, b;
  } cases[] = {
      {"add.Tensor [S(0),S(1)]", op_add, X_SS, -1},
      {"add.Tensor [S(0),S(1)]+[S(1),S(0)]", op_add2, X_SS, X_SS_T},
      {"mm [S(0),R]@[R,R]", op_mm, X_SR, W_RR},
      {"linear [R,S(1)]x[R,S(1)]", op_linear, X_RS, W_RS},
      {"sum [S(0),S(1)]", op_sum, X_SS, -1},
      {"softmax(dim 1) [S(0),S(1)]", op_softmax, X_SS, -1},
  };
  int count = (int)(sizeof cases / sizeof *cases);
  for (int c = 0; c < count && !st; c++) {
    int a = cases[c].a, b = cases[c].b;
    dt_tensor *dist[2] = {d[a], b >= 0 ? d[b] : NULL}, *local[2] = {l[a], b >= 0 ? l[b] : NULL};
    /* The local baseline of an elementwise op on two shards of different local shapes (the
     * transposed placements on a 2 x n mesh, n != 2) is the op on two shards of the first. */
    if (b >= 0 && cases[c].fn == op_add2 && dt_tensor_ndim(l[a]) == dt_tensor_ndim(l[b]) &&
        (dt_tensor_size(l[a], 0) != dt_tensor_size(l[b], 0) ||
         dt_tensor_size(l[a], 1) != dt_tensor_size(l[b], 1)))
      local[1] = l[a];
    st = measure(world, dist, local, mesh, cases[c].fn, &mine[c]);
    names[c] = cases[c].name;
  }
  if (!st) *n = count;
  for (int i = 0; i < N_T; i++) {
    dt_tensor_release(d[i]);
    dt_tensor_release(l[i]);
  }
  dt_mesh_destroy(mesh);
  return st;
}

static dt_status rank_fn(dt_comm *world, void *arg) {
  const bench_args *b = arg;
  int rank = dt_comm_rank(world), size = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  dt_status st =
      dt_mesh_create_on(b->device, world, 1, (int[]){size}, (const char *[]){"dp"}, &mesh);
  if (st) return st;
  dt_device device = dt_mesh_device(mesh);
  dt_tensor_options on_device = {.device = device};
  int64_t shape[] = {512, 512};
  dt_tensor *x = NULL, *w = NULL, *table = NULL, *idx = NULL, *xs = NULL, *x_local = NULL,
            *w_local = NULL;
  dt_tensor *table_local = NULL, *idx_local = NULL, *full_idx = NULL;
  st = dt_dist_rand(mesh, 2, shape, DT_F32, 1, 1, (dt_placement[]){dt_shard(0)}, &x);
  /* linear producing Partial(sum): x Shard(1) @ weight Shard(1)^T */
  if (!st) st = dt_dist_redistribute(x, 1, (dt_placement[]){dt_shard(1)}, &xs);
  if (!st)
    st = dt_dist_rand(mesh, 2, (int64_t[]){256, 512}, DT_F32, 2, 1, (dt_placement[]){dt_shard(1)},
                      &w);
  if (!st)
    st = dt_dist_rand(mesh, 2, (int64_t[]){1000, 64}, DT_F32, 3, 1,
                      (dt_placement[]){dt_replicate()}, &table);
  if (!st) st = dt_randint(0, 1000, 1, (int64_t[]){512}, DT_I64, 4, &full_idx);
  if (!st && device.kind != DT_DEVICE_CPU) { /* the indices on the mesh's device */
    dt_tensor *moved = NULL;
    st = dt_to_device(full_idx, device, &moved);
    dt_tensor_release(full_idx);
    full_idx = moved;
  }
  if (!st) st = dt_dist_distribute_tensor(mesh, full_idx, 1, (dt_placement[]){dt_shard(0)}, &idx);
  if (!st) st = dt_dist_to_local(x, &x_local);
  if (!st) st = dt_dist_to_local(w, &w_local);
  if (!st) st = dt_dist_to_local(table, &table_local);
  if (!st) st = dt_dist_to_local(idx, &idx_local);
  dt_tensor *xs_local = NULL;
  if (!st) st = dt_dist_to_local(xs, &xs_local);
  if (st) return st;
  struct {
    const char *name;
    op_fn fn;
    dt_tensor *dist[2], *local[2];
  } cases[] = {
      {"add.Tensor", op_add, {x, NULL}, {x_local, NULL}},
      {"detach", op_detach, {x, NULL}, {x_local, NULL}},
      {"view", op_view, {x, NULL}, {x_local, NULL}},
      {"linear", op_linear, {xs, w}, {xs_local, w_local}},
      {"embedding", op_embedding, {idx, table}, {idx_local, table_local}},
  };
  int n_cases = (int)(sizeof cases / sizeof *cases);
  figures mine[MAX_ROWS] = {0};
  for (int c = 0; c < n_cases && !st; c++)
    st = measure(world, cases[c].dist, cases[c].local, mesh, cases[c].fn, &mine[c]);
  /* redistribute Shard(0) -> Replicate: the miss is the first (planning) call. */
  if (!st) {
    figures *f = &mine[n_cases];
    double us[RUNS];
    dt_tensor *warm = NULL;
    st = dt_dist_redistribute(x, 1, (dt_placement[]){dt_replicate()}, &warm);
    dt_tensor_release(warm);
    /* Planning alone (no collective), from a cold cache. */
    char text[256];
    dt_dist_sharding_cache_clear();
    double p0 = bench_now_us();
    if (!st)
      st = dt_dist_redistribute_explain(x, 1, (dt_placement[]){dt_replicate()}, text, sizeof text,
                                        NULL);
    f->plan_us = bench_now_us() - p0;
    dt_dist_sharding_cache_clear();
    /* local: the same all_gather issued directly, after each hit. */
    dt_tensor *full = NULL;
    double local_us[RUNS - 1];
    /* torch.chunk's rows per rank (uneven worlds: 512 over 3 is 171, 171, 170). */
    int64_t counts[DT_BENCH_MAX_WORLD], chunk = (shape[0] + size - 1) / size;
    for (int r = 0; r < size; r++) {
      int64_t start = chunk * r;
      counts[r] = start >= shape[0] ? 0 : (start + chunk > shape[0] ? shape[0] - start : chunk);
    }
    if (!st) st = dt_empty_ex(2, shape, DT_F32, &on_device, &full);
    /* Line the ranks up, so the first (miss) call does not also time a late peer. */
    if (!st) st = dt_comm_barrier(world);
    for (int i = 0; i < RUNS && !st; i++) {
      dt_tensor *r = NULL;
      double t0 = bench_now_us();
      st = dt_dist_redistribute(x, 1, (dt_placement[]){dt_replicate()}, &r);
      us[i] = bench_now_us() - t0;
      dt_tensor_release(r);
      if (st || i == 0) continue;
      t0 = bench_now_us();
      st = dt_comm_all_gather_uneven(world, x_local, full, counts);
      local_us[i - 1] = bench_now_us() - t0;
    }
    f->miss_us = f->miss_min_us = f->miss_max_us = us[0];
    f->miss_hit_us = us[0] - us[1];
    if (!st) summarize(f, us + 1, local_us);
    dt_tensor_release(full);
  }
  const char *names[MAX_ROWS];
  for (int c = 0; c < n_cases; c++) names[c] = cases[c].name;
  names[n_cases] = "redistribute S(0)->R";
  int n_2d = 0;
  if (!st) st = run_2d(world, b->device, mine + n_cases + 1, names + n_cases + 1, &n_2d);
  int n_all = n_cases + 1 + n_2d;
  char mesh_1d[24], mesh_2d[24];
  snprintf(mesh_1d, sizeof mesh_1d, "[%d]", size);
  snprintf(mesh_2d, sizeof mesh_2d, "[2,%d]", size / 2);
  dt_objects *all = NULL;
  /* On the fake backend every rank but this one is imagined: its own figures are the rows. */
  bool fake = strcmp(dt_comm_backend_name(world), "fake") == 0;
  for (int c = 0; c < n_all && !st && fake; c++)
    print(b, names[c], c > n_cases ? mesh_2d : mesh_1d, 0, &mine[c]);
  if (!st && !fake)
    st = dt_comm_all_gather_object(world, mine, sizeof(figures) * (size_t)n_all, &all);
  if (!st && !fake && rank == 0) {
    for (int c = 0; c < n_all; c++) {
      const char *mesh_label = c > n_cases ? mesh_2d : mesh_1d;
      double miss[DT_BENCH_MAX_WORLD], hit[DT_BENCH_MAX_WORLD], loc[DT_BENCH_MAX_WORLD],
          miss_hit[DT_BENCH_MAX_WORLD];
      for (int r = 0; r < all->count; r++) {
        const figures *f = (const figures *)(all->data + all->offsets[r]) + c;
        print(b, names[c], mesh_label, r, f);
        miss[r] = f->miss_us, hit[r] = f->hit_us, loc[r] = f->local_us;
        miss_hit[r] = f->miss_hit_us;
      }
      double plan[DT_BENCH_MAX_WORLD];
      /* The median row's spread is over every rank's samples: the smallest min, largest max. */
      figures med = {.hit_min_us = 1e300, .local_min_us = 1e300, .miss_min_us = 1e300};
      for (int r = 0; r < all->count; r++) {
        const figures *f = (const figures *)(all->data + all->offsets[r]) + c;
        plan[r] = f->plan_us;
        med.hit_min_us = f->hit_min_us < med.hit_min_us ? f->hit_min_us : med.hit_min_us;
        med.hit_max_us = f->hit_max_us > med.hit_max_us ? f->hit_max_us : med.hit_max_us;
        med.local_min_us = f->local_min_us < med.local_min_us ? f->local_min_us : med.local_min_us;
        med.local_max_us = f->local_max_us > med.local_max_us ? f->local_max_us : med.local_max_us;
        med.miss_min_us = f->miss_min_us < med.miss_min_us ? f->miss_min_us : med.miss_min_us;
        med.miss_max_us = f->miss_max_us > med.miss_max_us ? f->miss_max_us : med.miss_max_us;
      }
      med.miss_us = median_of(miss, all->count);
      med.hit_us = median_of(hit, all->count);
      med.local_us = median_of(loc, all->count);
      med.plan_us = median_of(plan, all->count);
      med.miss_hit_us = median_of(miss_hit, all->count);
      print(b, names[c], mesh_label, -1, &med);
    }
  }
  dt_free(all);
  dt_tensor *rel[] = {x,        xs,      w,           table,     idx,     x_local,
                      xs_local, w_local, table_local, idx_local, full_idx};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) dt_tensor_release(rel[i]);
  dt_mesh_destroy(mesh);
  return st;
}

/* The rows on the fake backend: rank 0 of a world of b->world in this thread, the 1-D rows and,
 * for an even world of at least 4, the 2-D ones: what dispatch, planning and redistribution
 * cost at world sizes no machine here could run as threads. */
static dt_status run_fake(bench_args *b) {
  dt_comm_options opts = {.backend = "fake", .rank = 0, .world_size = b->world};
  dt_comm *world = NULL;
  dt_status st = dt_comm_init(&opts, &world);
  if (st) return st;
  b->backend = "fake";
  st = rank_fn(world, b);
  dt_comm_destroy(world);
  return st;
}

int bench_suite_dispatch(int argc, char **argv) {
  bench_args b = {.json = tool_has_flag(argc, argv, "--json"),
                  .world = 4,
                  .backend = "threads",
                  .device = "cpu"};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      b.device = argv[++i];
      if (strcmp(b.device, "cpu") != 0 && strcmp(b.device, "cuda") != 0) {
        fprintf(stderr, "bench dispatch: --device is cpu or cuda, got '%s'\n", b.device);
        return 2;
      }
    } else if (strcmp(argv[i], "--world") == 0 && i + 1 < argc) {
      char *end = NULL;
      long w = strtol(argv[++i], &end, 10);
      b.world = end && *end == '\0' ? (int)w : 0;
    } else if (strcmp(argv[i], "--json") != 0) {
      fprintf(stderr, "bench dispatch: unknown option '%s' (see 'dtensor bench dispatch --help')\n",
              argv[i]);
      return 2;
    }
  }
  if (b.world < 1 || b.world > DT_BENCH_MAX_WORLD) {
    fprintf(stderr,
            "bench dispatch: --world must be 1..%d (threads up to %d, the fake backend beyond)\n",
            DT_BENCH_MAX_WORLD, DT_COMM_MAX_THREADS);
    return 2;
  }
  /* Ranks are threads on few cores: one BLAS thread each keeps linear's timings steady. */
  bench_machine_print(b.json);
  dt_set_num_threads(1); /* one thread: the BLAS's and the kernels' */
  dt_status st = b.world <= DT_COMM_MAX_THREADS ? dt_comm_spawn(b.world, rank_fn, &b) : DT_OK;
  if (!st) st = run_fake(&b);
  if (st) {
    fprintf(stderr, "bench dispatch: %s\n", dt_last_error());
    return 1;
  }
  return 0;
}
