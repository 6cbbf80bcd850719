/*
 * dtensor bench ckpt: save and load bandwidth of a distributed state dict (dt_checkpoint_save
 * and dt_checkpoint_load) on 1 and 4 ranks (threads), against a raw write + fsync and pread of
 * the same bytes per rank in the same run, and the time a memory-mapped load takes to hand
 * back its first tensor.
 *
 * The state dict is 4 float32 tensors [rows, 1024] sharded by rows; --size is its total
 * (default 256 MiB; --1g for 1 GiB). Files live in a new folder dt_bench_ckpt_XXXXXX (mkdtemp,
 * mode 0700) under --dir (default /tmp), removed at the end: only that folder and what the bench
 * wrote in it, walked with nftw without following links, never through a shell.
 * Each side runs --reps times (default 3), alternating (raw, save, load, raw, ...); each
 * figure is the median over the repetitions with its spread (min..max), and the ratios are
 * ratios of medians.
 * Both sides read from the page cache (the files were just written), so the ratio compares
 * the library's work against the system calls, not the disk.
 *
 * --many N measures the per-tensor costs instead: a save and a load of N small tensors
 * ([8] float32, Shard(0)) on 1 and 4 ranks, and a safetensors file of 100,000 one-element
 * tensors opened and every tensor loaded by name.
 */
/* nftw is an X/Open function: the build's _POSIX_C_SOURCE alone does not declare it. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_machine.h"
#include "bench_util.h"
#include "core/core_impl.h"
#include "dtensor/dtensor.h"
#include "tools.h"

#define N_TENSORS 4
#define COLS 1024
#define MAX_REPS 100

typedef struct ckpt_bench {
  const char *dir;
  int64_t rows; /* per tensor */
  int reps;
  bool skip_checksum; /* --no-checksum: dt_checkpoint_load_ex's skip_data_checksum */
  /* Rank 0's samples: save, load, raw write, raw read, microseconds per repetition. */
  double us[4][MAX_REPS];
} ckpt_bench;

static const char *const names[N_TENSORS] = {"layers.0.weight", "layers.1.weight",
                                             "layers.2.weight", "layers.3.weight"};

/* Raw baseline: this rank's bytes written once with write + fsync, read back with pread. */
static dt_status raw_io(const char *dir, int rank, const void *data, size_t bytes, void *back,
                        double *write_us, double *read_us, dt_comm *world) {
  char path[4096];
  snprintf(path, sizeof path, "%s/bench_raw_%d.bin", dir, rank);
  dt_status st = dt_comm_barrier(world);
  double t0 = bench_now_us();
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
  size_t done = 0;
  while (fd >= 0 && done < bytes) {
    ssize_t w = write(fd, (const char *)data + done, bytes - done);
    if (w <= 0) break;
    done += (size_t)w;
  }
  bool ok = fd >= 0 && done == bytes && fsync(fd) == 0;
  if (fd >= 0) close(fd);
  if (!st) st = dt_comm_barrier(world);
  int err = errno;
  *write_us = bench_now_us() - t0;
  if (!ok)
    return dt__error(DT_ERR_IO, "bench ckpt: writing %s failed: %s", path,
                     strerror(err ? err : EIO));
  if (!st) st = dt_comm_barrier(world);
  t0 = bench_now_us();
  fd = open(path, O_RDONLY);
  done = 0;
  while (fd >= 0 && done < bytes) {
    ssize_t r = pread(fd, (char *)back + done, bytes - done, (off_t)done);
    if (r <= 0) break;
    done += (size_t)r;
  }
  if (fd >= 0) close(fd);
  if (!st) st = dt_comm_barrier(world);
  *read_us = bench_now_us() - t0;
  unlink(path);
  if (st) return st;
  return done == bytes ? DT_OK : dt__error(DT_ERR_IO, "bench ckpt: reading %s back failed", path);
}

static dt_status ckpt_rank(dt_comm *world, void *arg) {
  ckpt_bench *b = arg;
  int rank = dt_comm_rank(world), size = dt_comm_size(world);
  dt_mesh *mesh = NULL;
  dt_tensor *saved[N_TENSORS] = {NULL}, *loaded[N_TENSORS] = {NULL};
  void *raw = NULL, *back = NULL;
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/bench_ckpt_%d", b->dir, size);
  dt_status st = dt_mesh_create(world, 1, (int[]){size}, NULL, &mesh);
  dt_placement rows = dt_shard(0);
  int64_t shape[2] = {b->rows, COLS};
  for (int k = 0; k < N_TENSORS && !st; k++) {
    st = dt_dist_rand(mesh, 2, shape, DT_F32, (uint64_t)k, 1, &rows, &saved[k]);
    if (!st) st = dt_dist_zeros(mesh, 2, shape, DT_F32, 1, &rows, &loaded[k]);
  }
  if (st) goto done;
  /* The raw baseline moves this rank's bytes of every tensor, as one buffer. */
  size_t per_tensor = 0;
  for (int k = 0; k < N_TENSORS; k++) {
    dt_tensor *local = NULL;
    st = dt_dist_to_local(saved[k], &local);
    if (st) goto done;
    per_tensor = (size_t)dt_tensor_numel(local) * 4;
    if (!raw) {
      raw = malloc(per_tensor * N_TENSORS);
      back = malloc(per_tensor * N_TENSORS);
    }
    if (raw) memcpy((char *)raw + per_tensor * (size_t)k, dt_tensor_data(local), per_tensor);
    dt_tensor_release(local);
  }
  if (!raw || !back) {
    st = DT_ERR_NOMEM;
    goto done;
  }
  /* The checkpoint loads into tensors whose pages are already touched; so does the baseline. */
  memset(back, 0, per_tensor * N_TENSORS);
  /* Alternating repetitions: the machine is shared and the page cache of a small container
   * evicts, so one pass of each side would favour whichever ran in a quiet moment. */
  for (int rep = 0; rep < b->reps && !st; rep++) {
    double write_us = 0, read_us = 0;
    st = raw_io(b->dir, rank, raw, per_tensor * N_TENSORS, back, &write_us, &read_us, world);
    if (!st) st = dt_comm_barrier(world);
    double t0 = bench_now_us();
    if (!st) st = dt_checkpoint_save(dir, mesh, N_TENSORS, names, saved);
    if (!st) st = dt_comm_barrier(world);
    double save_us = bench_now_us() - t0;
    t0 = bench_now_us();
    dt_checkpoint_load_options o = {.skip_data_checksum = b->skip_checksum};
    if (!st) st = dt_checkpoint_load_ex(dir, N_TENSORS, names, loaded, &o);
    if (!st) st = dt_comm_barrier(world);
    double load_us = bench_now_us() - t0;
    double now[4] = {save_us, load_us, write_us, read_us};
    for (int i = 0; i < 4 && rank == 0; i++) b->us[i][rep] = now[i];
  }
done:
  free(raw);
  free(back);
  for (int k = 0; k < N_TENSORS; k++) {
    dt_tensor_release(saved[k]);
    dt_tensor_release(loaded[k]);
  }
  dt_mesh_destroy(mesh);
  return st;
}

/* A memory-mapped load: open the 1-rank checkpoint's data file and borrow its first tensor.
 * Every save makes a new generation (__G_0.safetensors), so the newest one is looked up. */
static double mmap_first_tensor_us(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/bench_ckpt_1", dir);
  DIR *d = opendir(path);
  long long newest = -1;
  for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
    long long g = 0;
    int r = -1, n = 0;
    if (sscanf(e->d_name, "__%lld_%d.safetensors%n", &g, &r, &n) == 2 && r == 0 &&
        e->d_name[n] == '\0' && g > newest)
      newest = g;
  }
  if (d) closedir(d);
  if (newest < 0) return -1;
  snprintf(path, sizeof path, "%s/bench_ckpt_1/__%lld_0.safetensors", dir, newest);
  double t0 = bench_now_us();
  dt_safetensors *f = NULL;
  dt_tensor *t = NULL;
  if (dt_safetensors_open(path, &f)) return -1;
  dt_status st = dt_safetensors_load(f, names[0], DT_SAFETENSORS_BORROW, &t);
  double us = bench_now_us() - t0;
  dt_tensor_release(t);
  dt_safetensors_destroy(f);
  return st ? -1 : us;
}

/* nftw's callback: every entry of the bench's own folder, children before their folder. */
static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb;
  (void)ftw;
  (void)type;
  if (remove(path) != 0 && errno != ENOENT)
    fprintf(stderr, "bench ckpt: could not remove %s: %s\n", path, strerror(errno));
  return 0; /* the rest is still removed */
}

/* Removes a folder under the one bench_work_dir made (or that folder itself) and everything in
 * it: FTW_PHYS never follows a link (a link is removed itself), FTW_MOUNT never leaves the file
 * system. The folder is the bench's own (mkdtemp, mode 0700), so nothing in it belongs to anyone
 * else. A folder a failed run never created is not an error. */
static void remove_tree(const char *path) {
  if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0 && errno != ENOENT)
    fprintf(stderr, "bench ckpt: could not walk %s: %s\n", path, strerror(errno));
}

/* A world's checkpoint, removed once measured so that two never take the disk at once. */
static void remove_checkpoint(const char *work, const char *kind, int world) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s_%d", work, kind, world);
  remove_tree(path);
}

/* A new folder dt_bench_ckpt_XXXXXX under `dir` for every file of the run; 0 or -1 with a
 * message on stderr. */
static int bench_work_dir(const char *dir, char *work, size_t size) {
  if ((size_t)snprintf(work, size, "%s/dt_bench_ckpt_XXXXXX", dir) >= size) {
    fprintf(stderr, "bench ckpt: --dir %s is too long\n", dir);
    return -1;
  }
  if (!mkdtemp(work)) {
    fprintf(stderr, "bench ckpt: cannot create a folder in --dir %s: %s\n", dir, strerror(errno));
    return -1;
  }
  return 0;
}

/* ---- --many: per-tensor costs ------------------------------------------------------------ */

typedef struct many_bench {
  const char *dir;
  int n;
  double save_us, load_us; /* rank 0's */
} many_bench;

static dt_status many_rank(dt_comm *world, void *arg) {
  many_bench *b = arg;
  int size = dt_comm_size(world);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/bench_ckpt_many_%d", b->dir, size);
  dt_mesh *mesh = NULL;
  dt_tensor **saved = calloc((size_t)b->n, sizeof *saved);
  dt_tensor **loaded = calloc((size_t)b->n, sizeof *loaded);
  char **names_n = calloc((size_t)b->n, sizeof *names_n);
  dt_status st = saved && loaded && names_n ? DT_OK : DT_ERR_NOMEM;
  if (!st) st = dt_mesh_create(world, 1, (int[]){size}, NULL, &mesh);
  dt_placement rows = dt_shard(0);
  for (int i = 0; i < b->n && !st; i++) {
    names_n[i] = malloc(32);
    if (!names_n[i]) {
      st = DT_ERR_NOMEM;
      break;
    }
    snprintf(names_n[i], 32, "layers.%d.weight", i);
    st = dt_dist_rand(mesh, 1, (int64_t[]){8}, DT_F32, (uint64_t)i, 1, &rows, &saved[i]);
    if (!st) st = dt_dist_zeros(mesh, 1, (int64_t[]){8}, DT_F32, 1, &rows, &loaded[i]);
  }
  if (!st) st = dt_comm_barrier(world);
  double t0 = bench_now_us();
  if (!st) st = dt_checkpoint_save(dir, mesh, b->n, (const char *const *)names_n, saved);
  if (!st) st = dt_comm_barrier(world);
  double save_us = bench_now_us() - t0;
  t0 = bench_now_us();
  if (!st) st = dt_checkpoint_load(dir, b->n, (const char *const *)names_n, loaded);
  if (!st) st = dt_comm_barrier(world);
  if (dt_comm_rank(world) == 0) {
    b->save_us = save_us;
    b->load_us = bench_now_us() - t0;
  }
  for (int i = 0; i < b->n; i++) {
    if (saved) dt_tensor_release(saved[i]);
    if (loaded) dt_tensor_release(loaded[i]);
    if (names_n) free(names_n[i]);
  }
  free(saved);
  free(loaded);
  free(names_n);
  dt_mesh_destroy(mesh);
  return st;
}

/* A safetensors file of `count` one-element tensors: open it and load each by name. */
static double lookup_by_name_us(const char *dir, int count) {
  char path[4096];
  snprintf(path, sizeof path, "%s/bench_ckpt_lookup.safetensors", dir);
  char **keys = calloc((size_t)count, sizeof *keys);
  dt_tensor **values = calloc((size_t)count, sizeof *values);
  double us = -1;
  bool ok = keys && values;
  for (int i = 0; i < count && ok; i++) {
    keys[i] = malloc(32);
    ok = keys[i] && !dt_full(1, (int64_t[]){1}, (double)i, DT_F32, &values[i]);
    if (ok) snprintf(keys[i], 32, "model.t%d", i);
  }
  if (ok) ok = !dt_safetensors_save(path, count, (const char *const *)keys, values, 0, NULL, NULL);
  if (ok) {
    double t0 = bench_now_us();
    dt_safetensors *f = NULL;
    ok = !dt_safetensors_open(path, &f);
    for (int i = 0; i < count && ok; i++) {
      dt_tensor *t = NULL;
      ok = !dt_safetensors_load(f, keys[i], DT_SAFETENSORS_COPY, &t) &&
           ((const float *)dt_tensor_data(t))[0] == (float)i;
      dt_tensor_release(t);
    }
    dt_safetensors_destroy(f);
    if (ok) us = bench_now_us() - t0;
  }
  for (int i = 0; i < count; i++) {
    if (keys) free(keys[i]);
    if (values) dt_tensor_release(values[i]);
  }
  free(keys);
  free(values);
  unlink(path);
  return us;
}

static int bench_ckpt_many(const char *dir, int n, bool json) {
  bench_machine_print(json);
  const int worlds[2] = {1, 4};
  for (int w = 0; w < 2; w++) {
    many_bench b = {.dir = dir, .n = n};
    dt_status st = dt_comm_spawn(worlds[w], many_rank, &b);
    remove_checkpoint(dir, "bench_ckpt_many", worlds[w]);
    if (st) {
      fprintf(stderr, "bench ckpt --many: world %d: %s\n", worlds[w], dt_last_error());
      return 1;
    }
    if (json)
      printf("{\"name\":\"ckpt_many\",\"world\":%d,\"tensors\":%d,\"save_s\":%.3f,"
             "\"load_s\":%.3f}\n",
             worlds[w], n, b.save_us / 1e6, b.load_us / 1e6);
    else
      printf("world %d, %d tensors of [8] float32, Shard(0): save %.3f s, load %.3f s\n", worlds[w],
             n, b.save_us / 1e6, b.load_us / 1e6);
  }
  const int count = 100000;
  double us = lookup_by_name_us(dir, count);
  if (us < 0) {
    fprintf(stderr, "bench ckpt --many: the safetensors lookup failed: %s\n", dt_last_error());
    return 1;
  }
  if (json)
    printf("{\"name\":\"safetensors_lookup\",\"tensors\":%d,\"open_and_load_all_s\":%.3f}\n", count,
           us / 1e6);
  else
    printf("safetensors, %d tensors: open + load every tensor by name %.3f s\n", count, us / 1e6);
  return 0;
}

/* --size: a whole number of bytes with an optional K, M or G; -1 for anything else ("1X"
 * was read as 1). */
static long long parse_size(const char *s) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || v < 0) return -1;
  long long unit = 1;
  if (*end == 'K' || *end == 'k')
    unit = 1024, end++;
  else if (*end == 'M' || *end == 'm')
    unit = 1024 * 1024, end++;
  else if (*end == 'G' || *end == 'g')
    unit = 1024LL * 1024 * 1024, end++;
  if (*end || v > INT64_MAX / unit) return -1;
  return v * unit;
}

/* --dir must be a directory this process can write: said up front, naming it and why. */
static bool dir_usable(const char *dir) {
  struct stat sb;
  const char *why = NULL;
  if (stat(dir, &sb) != 0)
    why = strerror(errno);
  else if (!S_ISDIR(sb.st_mode))
    why = strerror(ENOTDIR);
  else if (access(dir, W_OK | X_OK) != 0)
    why = strerror(errno);
  if (why) fprintf(stderr, "bench ckpt: --dir %s: %s\n", dir, why);
  return why == NULL;
}

/* The bandwidth figures of 1 and 4 ranks, every file under `work`; a process exit code. */
static int bench_ckpt_bandwidth(const char *work, int64_t rows, int reps, bool skip_checksum,
                                bool json) {
  bench_machine_print(json);
  double gib = (double)(rows * COLS * 4 * N_TENSORS) / (double)(1 << 30);
  const int worlds[2] = {1, 4};
  for (int w = 0; w < 2; w++) {
    ckpt_bench b = {.dir = work, .rows = rows, .reps = reps, .skip_checksum = skip_checksum};
    dt_status st = dt_comm_spawn(worlds[w], ckpt_rank, &b);
    double mmap_us = worlds[w] == 1 && !st ? mmap_first_tensor_us(work) : -1;
    remove_checkpoint(work, "bench_ckpt", worlds[w]);
    if (st) {
      fprintf(stderr, "bench ckpt: world %d: %s\n", worlds[w], dt_last_error());
      return 1;
    }
    /* GiB/s of each repetition; a stats' min time is its max bandwidth. */
    bench_stats g[4];
    for (int i = 0; i < 4; i++) {
      double gibs[MAX_REPS];
      for (int r = 0; r < reps; r++) gibs[r] = gib / (b.us[i][r] / 1e6);
      g[i] = bench_stats_of(gibs, reps);
    }
    if (json) {
      printf("{\"name\":\"ckpt\",\"world\":%d,\"bytes\":%lld,\"reps\":%d,\"save_gib_s\":%.3f,"
             "\"save_min_gib_s\":%.3f,\"save_max_gib_s\":%.3f,\"raw_write_gib_s\":%.3f,"
             "\"save_ratio\":%.3f,\"load_gib_s\":%.3f,\"load_min_gib_s\":%.3f,"
             "\"load_max_gib_s\":%.3f,\"raw_read_gib_s\":%.3f,\"load_ratio\":%.3f",
             worlds[w], (long long)(rows * COLS * 4 * N_TENSORS), reps, g[0].median, g[0].min,
             g[0].max, g[2].median, g[0].median / g[2].median, g[1].median, g[1].min, g[1].max,
             g[3].median, g[1].median / g[3].median);
      if (mmap_us >= 0) printf(",\"mmap_first_tensor_us\":%.1f", mmap_us);
      printf("}\n");
    } else {
      printf("world %d, %.3f GiB, median of %d alternating reps: save %.2f GiB/s (%.2f..%.2f; raw "
             "write+fsync %.2f, ratio %.2f), load %.2f GiB/s (%.2f..%.2f; raw pread %.2f, ratio "
             "%.2f)",
             worlds[w], gib, reps, g[0].median, g[0].min, g[0].max, g[2].median,
             g[0].median / g[2].median, g[1].median, g[1].min, g[1].max, g[3].median,
             g[1].median / g[3].median);
      if (mmap_us >= 0) printf("; mmap load, time to first tensor %.1f us", mmap_us);
      printf("\n");
    }
  }
  return 0;
}

int bench_suite_ckpt(int argc, char **argv) {
  bool json = tool_has_flag(argc, argv, "--json");
  long long size = 256LL << 20;
  const char *dir = "/tmp";
  int reps = 3, many = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--many") == 0 && i + 1 < argc) many = atoi(argv[++i]);
    if (strcmp(argv[i], "--1g") == 0) size = 1LL << 30;
    if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
      size = parse_size(argv[++i]);
      if (size < 0) {
        fprintf(stderr, "bench ckpt: --size wants bytes with an optional K, M or G, got '%s'\n",
                argv[i]);
        return 2;
      }
    }
    if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) dir = argv[++i];
    if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
  }
  if (many < 0 || many > 10000000) {
    fprintf(stderr, "bench ckpt: --many %d is outside 1..10000000\n", many);
    return 2;
  }
  if (!dir_usable(dir)) return 2;
  if (many > 0) {
    char work[3072]; /* room for the file names below it in 4096 */
    if (bench_work_dir(dir, work, sizeof work)) return 1;
    int rc = bench_ckpt_many(work, many, json);
    remove_tree(work);
    return rc;
  }
  int64_t rows = size / (N_TENSORS * COLS * 4);
  if (reps < 1 || reps > MAX_REPS) {
    fprintf(stderr, "bench ckpt: --reps %d is outside 1..100\n", reps);
    return 2;
  }
  if (rows < 4) {
    fprintf(stderr, "bench ckpt: --size %lld is below the 64 KiB minimum\n", size);
    return 2;
  }
  char work[3072]; /* room for the file names below it in 4096 */
  if (bench_work_dir(dir, work, sizeof work)) return 1;
  int rc = bench_ckpt_bandwidth(work, rows, reps, tool_has_flag(argc, argv, "--no-checksum"), json);
  remove_tree(work);
  return rc;
}
