/* State dicts (the PyTorch MLP fixture on 1, 2 and 4 ranks) and distributed checkpoints:
 * resharding between every pair of layouts on 1-4 ranks and 1-D / 2x2 meshes, bytes read per
 * rank, crash safety at each step of a save, and corrupt checkpoints refused. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Private header: a crash at any step of a save keeps the previous checkpoint:
 * dt__checkpoint_fail_step injects it. */
#include "checkpoint/checkpoint_impl.h"
#include "comm_helpers.h"
#include "fixture_main.h"
#include "fs_helpers.h"

static const char *fixtures_dir(void) {
  const char *env = getenv("DT_FIXTURES_DIR");
  if (env && env[0]) return env;
#ifdef DT_FIXTURES_DIR
  return DT_FIXTURES_DIR;
#else
  return "../shared/fixtures";
#endif
}

/* ---- State dicts -------------------------------------------------------------------------- */

typedef struct mlp_case {
  int world; /* 0: plain local model */
  char model[4096], io[4096];
} mlp_case;

static dt_status mlp_rank(dt_comm *world, void *arg) {
  mlp_case *c = arg;
  dt_module *model = NULL;
  dt_mesh *mesh = NULL;
  dt_safetensors *weights = NULL, *io = NULL;
  dt_tensor *x = NULL, *y = NULL, *out = NULL;
  RANK_OK(dt_nn_mlp(12, 18, 6, true, true, 99, &model));
  if (world) {
    RANK_OK(dt_mesh_create(world, 1, (int[]){dt_comm_size(world)}, NULL, &mesh));
    dt_tp_plan plan = {2, (dt_tp_plan_entry[]){{"0", DT_TP_COLWISE}, {"2", DT_TP_ROWWISE}}};
    RANK_OK(dt_parallel_tp_module(model, mesh, &plan, NULL));
  }
  RANK_OK(dt_safetensors_open(c->model, &weights));
  dt_state_dict_report report;
  RANK_OK(dt_state_dict_load(model, weights, NULL, &report));
  RANK_CHECK(report.n_missing == 0 && report.n_unexpected == 0, "clean load");
  if (world) {
    /* Each rank read about its share of the weights, not the whole file. */
    uint64_t read = dt_safetensors_bytes_read(weights);
    RANK_CHECK(read < 1392, "rank read %llu of 1392 bytes", (unsigned long long)read);
  }
  RANK_OK(dt_safetensors_open(c->io, &io));
  RANK_OK(dt_safetensors_load(io, "x", DT_SAFETENSORS_COPY, &x));
  RANK_OK(dt_safetensors_load(io, "y", DT_SAFETENSORS_COPY, &y));
  RANK_OK(dt_module_forward(model, x, &out));
  RANK_CHECK(!dt_tensor_is_distributed(out) && dt_tensor_numel(out) == 60, "local [10, 6]");
  const float *a = dt_tensor_data(out), *b = dt_tensor_data(y);
  double worst = 0;
  for (int i = 0; i < 60; i++) worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
  /* 1e-6 absolute is what float32 sums of 18 products of this size allow (outputs are
   * O(1), one float32 ulp is ~1.2e-7, and summation order differs from PyTorch's). */
  RANK_CHECK(worst <= 1e-6, "world %d: max abs diff %g", world ? dt_comm_size(world) : 1, worst);
  dt_tensor_release(x);
  dt_tensor_release(y);
  dt_tensor_release(out);
  dt_safetensors_destroy(io);
  dt_safetensors_destroy(weights);
  dt_module_destroy(model);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static bool mlp_paths(mlp_case *c) {
  snprintf(c->model, sizeof c->model, "%s/safetensors/mlp_12_18_6.safetensors", fixtures_dir());
  snprintf(c->io, sizeof c->io, "%s/safetensors/mlp_12_18_6.io.safetensors", fixtures_dir());
  if (access(c->model, R_OK) != 0 || access(c->io, R_OK) != 0) {
    cr_skip_test("fixture %s is absent (set DT_FIXTURES_DIR)", c->model);
    return false;
  }
  return true;
}

Test(state_dict, mlp_fixture_matches_pytorch_on_1_2_4_ranks) {
  mlp_case c;
  if (!mlp_paths(&c)) return;
  cr_assert_eq(mlp_rank(NULL, &c), DT_OK, "%s", dt_last_error());
  SPAWN_OK(2, mlp_rank, &c);
  SPAWN_OK(4, mlp_rank, &c);
}

Test(state_dict, strict_non_strict_and_mismatches) {
  mlp_case c;
  if (!mlp_paths(&c)) return;
  dt_safetensors *weights = NULL;
  cr_assert_eq(dt_safetensors_open(c.model, &weights), DT_OK);
  /* No second bias: 2.bias is unexpected. */
  dt_module *model = NULL;
  cr_assert_eq(dt_nn_mlp(12, 18, 6, true, false, 1, &model), DT_OK);
  dt_tensor *before = dt_module_get_tensor(model, "0.weight");
  cr_assert_eq(dt_state_dict_load(model, weights, NULL, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "dt_state_dict_load") && strstr(dt_last_error(), "2.bias"),
            "%s", dt_last_error());
  cr_assert_eq(dt_module_get_tensor(model, "0.weight"), before, "strict failure changed nothing");
  dt_state_dict_report report;
  dt_state_dict_options lenient = {.non_strict = true};
  cr_assert_eq(dt_state_dict_load(model, weights, &lenient, &report), DT_OK, "%s", dt_last_error());
  cr_assert_eq(report.n_unexpected, 1);
  cr_assert_eq(report.n_missing, 0);
  cr_assert_str_eq(report.unexpected, "2.bias");
  dt_state_dict_report_clear(&report);
  dt_module_destroy(model);
  /* A bigger hidden layer: 0.weight is [20, 12] here and [18, 12] in the file. */
  cr_assert_eq(dt_nn_mlp(12, 20, 6, true, true, 1, &model), DT_OK);
  cr_assert_eq(dt_state_dict_load(model, weights, &lenient, NULL), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "0.bias") || strstr(dt_last_error(), "0.weight"), "%s",
            dt_last_error());
  dt_module_destroy(model);
  cr_assert_eq(dt_state_dict_load(NULL, weights, NULL, NULL), DT_ERR_INVALID);
  dt_safetensors_destroy(weights);
}

Test(state_dict, save_then_load_round_trip) {
  dt_module *a = NULL, *b = NULL;
  cr_assert_eq(dt_nn_mlp(5, 7, 3, true, true, 1, &a), DT_OK);
  cr_assert_eq(dt_nn_mlp(5, 7, 3, true, true, 2, &b), DT_OK);
  char path[] = "/tmp/dt_state_dict_XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  cr_assert_eq(dt_state_dict_save(a, path), DT_OK, "%s", dt_last_error());
  dt_safetensors *f = NULL;
  cr_assert_eq(dt_safetensors_open(path, &f), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_state_dict_load(b, f, NULL, NULL), DT_OK, "%s", dt_last_error());
  const char *keys[] = {"0.weight", "0.bias", "2.weight", "2.bias"};
  for (int k = 0; k < 4; k++) {
    dt_tensor *x = dt_module_get_tensor(a, keys[k]), *y = dt_module_get_tensor(b, keys[k]);
    cr_assert_eq(memcmp(dt_tensor_data(x), dt_tensor_data(y), (size_t)dt_tensor_numel(x) * 4), 0,
                 "%s", keys[k]);
  }
  dt_safetensors_destroy(f);
  unlink(path);
  dt_module_destroy(a);
  dt_module_destroy(b);
}

/* ---- Distributed checkpoints -------------------------------------------------------------- */

/* A layout: a world size, a mesh shape and placements. */
typedef struct layout {
  int world, mesh_ndim, mesh[2];
  dt_placement p[2];
  const char *label;
} layout;

static layout layouts[12];
static int n_layouts;

static void make_layouts(void) {
  n_layouts = 0;
  layouts[n_layouts++] = (layout){1, 1, {1}, {dt_replicate()}, "1:R"};
  layouts[n_layouts++] = (layout){2, 1, {2}, {dt_shard(0)}, "2:S0"};
  layouts[n_layouts++] = (layout){2, 1, {2}, {dt_replicate()}, "2:R"};
  layouts[n_layouts++] = (layout){3, 1, {3}, {dt_shard(1)}, "3:S1"};
  layouts[n_layouts++] = (layout){3, 1, {3}, {dt_shard(0)}, "3:S0"};
  layouts[n_layouts++] = (layout){4, 1, {4}, {dt_shard(0)}, "4:S0"};
  layouts[n_layouts++] = (layout){4, 1, {4}, {dt_replicate()}, "4:R"};
  layouts[n_layouts++] = (layout){4, 2, {2, 2}, {dt_shard(0), dt_shard(1)}, "2x2:S0,S1"};
  layouts[n_layouts++] = (layout){4, 2, {2, 2}, {dt_replicate(), dt_shard(0)}, "2x2:R,S0"};
  layouts[n_layouts++] = (layout){4, 2, {2, 2}, {dt_shard(1), dt_shard(1)}, "2x2:S1,S1"};
}

/* Uneven on purpose: 7 rows and 5 columns split 2, 3 and 4 ways. */
static const int64_t shape_a[2] = {7, 5};
static const int64_t shape_b[1] = {6};

static double value_at(int which, int64_t i, int generation) {
  return (double)(which * 1000 + i * 3 + generation * 100000) + 0.25;
}

static dt_tensor *full_tensor(int which, int generation) {
  int ndim = which == 0 ? 2 : 1;
  const int64_t *shape = which == 0 ? shape_a : shape_b;
  dt_tensor *t = NULL;
  dt_empty(ndim, shape, which == 0 ? DT_F32 : DT_F64, &t);
  for (int64_t i = 0; i < dt_tensor_numel(t); i++) {
    if (which == 0)
      ((float *)dt_tensor_data(t))[i] = (float)value_at(which, i, generation);
    else
      ((double *)dt_tensor_data(t))[i] = value_at(which, i, generation);
  }
  return t;
}

typedef struct dcp_case {
  const layout *from, *to;
  const char *dir;
  int generation;  /* values to save / expect */
  int fail_step;   /* expected failure of the save, 0 for none */
  bool expect_old; /* load expects generation - 1 */
} dcp_case;

/* The layout's placements for a tensor of ndim dims: Shard(1) of a 1-D tensor is Shard(0). */
static const dt_placement *placements_for(const layout *l, int ndim, dt_placement *buf) {
  for (int m = 0; m < l->mesh_ndim; m++) {
    buf[m] = l->p[m];
    if (buf[m].kind == DT_SHARD && buf[m].dim >= ndim) buf[m] = dt_shard(0);
  }
  return buf;
}

static dt_status make_mesh(dt_comm *world, const layout *l, dt_mesh **mesh) {
  return dt_mesh_create(world, l->mesh_ndim, l->mesh, NULL, mesh);
}

static dt_status save_rank(dt_comm *world, void *arg) {
  dcp_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(make_mesh(world, c->from, &mesh));
  dt_tensor *full[2] = {full_tensor(0, c->generation), full_tensor(1, c->generation)};
  dt_tensor *dist[3] = {NULL, NULL, NULL};
  for (int k = 0; k < 2; k++) {
    dt_placement p[2];
    RANK_OK(dt_dist_distribute_tensor(mesh, full[k], c->from->mesh_ndim,
                                      placements_for(c->from, k == 0 ? 2 : 1, p), &dist[k]));
  }
  dist[2] = dt_tensor_retain(full[1]); /* a local tensor: written once by rank 0 */
  const char *names[3] = {"a", "b", "local"};
  dt_status st = dt_checkpoint_save(c->dir, mesh, 3, names, dist);
  if (c->fail_step)
    RANK_CHECK(st == DT_ERR_IO, "an injected failure at step %d fails every rank", c->fail_step);
  else
    RANK_OK(st);
  for (int k = 0; k < 3; k++) dt_tensor_release(dist[k]);
  for (int k = 0; k < 2; k++) dt_tensor_release(full[k]);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

/* One load of every tensor into fresh targets, compared with `expected`; *read is the bytes
 * the load read. */
static dt_status load_once(dt_comm *world, const dcp_case *c, dt_mesh *mesh, int generation,
                           const dt_checkpoint_load_options *options, uint64_t *read,
                           uint64_t *need) {
  dt_tensor *targets[3] = {NULL, NULL, NULL}, *expected[3] = {NULL, NULL, NULL};
  for (int k = 0; k < 2; k++) {
    int ndim = k == 0 ? 2 : 1;
    dt_placement p[2];
    placements_for(c->to, ndim, p);
    RANK_OK(dt_dist_zeros(mesh, ndim, k == 0 ? shape_a : shape_b, k == 0 ? DT_F32 : DT_F64,
                          c->to->mesh_ndim, p, &targets[k]));
    dt_tensor *full = full_tensor(k, generation);
    RANK_OK(dt_dist_distribute_tensor(mesh, full, c->to->mesh_ndim, p, &expected[k]));
    dt_tensor_release(full);
  }
  RANK_OK(dt_zeros(1, shape_b, DT_F64, &targets[2]));
  expected[2] = full_tensor(1, generation);
  const char *names[3] = {"a", "b", "local"};
  uint64_t before = dt_checkpoint_bytes_read();
  RANK_OK(dt_checkpoint_load_ex(c->dir, 3, names, targets, options));
  *read = dt_checkpoint_bytes_read() - before;
  *need = 6 * 8; /* the local tensor, whole */
  for (int k = 0; k < 3; k++) {
    dt_tensor *got = NULL, *want = NULL;
    if (k < 2) {
      RANK_OK(dt_dist_to_local(targets[k], &got));
      RANK_OK(dt_dist_to_local(expected[k], &want));
      *need += (uint64_t)dt_tensor_numel(got) * dt_dtype_size(dt_tensor_dtype(got));
    } else {
      got = dt_tensor_retain(targets[k]);
      want = dt_tensor_retain(expected[k]);
    }
    RANK_CHECK(dt_tensor_numel(got) == dt_tensor_numel(want), "sizes");
    size_t bytes = (size_t)dt_tensor_numel(got) * dt_dtype_size(dt_tensor_dtype(got));
    RANK_CHECK(bytes == 0 || memcmp(dt_tensor_data(got), dt_tensor_data(want), bytes) == 0,
               "%s -> %s: tensor %s differs on rank %d", c->from->label, c->to->label, names[k],
               dt_comm_rank(world));
    dt_tensor_release(got);
    dt_tensor_release(want);
  }
  for (int k = 0; k < 3; k++) {
    dt_tensor_release(targets[k]);
    dt_tensor_release(expected[k]);
  }
  return DT_OK;
}

static dt_status load_rank(dt_comm *world, void *arg) {
  dcp_case *c = arg;
  dt_mesh *mesh = NULL;
  RANK_OK(make_mesh(world, c->to, &mesh));
  int generation = c->expect_old ? c->generation - 1 : c->generation;
  /* By default every file a rank reads from is read once more, whole, for its checksum. */
  uint64_t read = 0, need = 0;
  RANK_OK(load_once(world, c, mesh, generation, NULL, &read, &need));
  RANK_CHECK(read > need, "%s -> %s: rank %d read %llu bytes with checksums, its blocks %llu",
             c->from->label, c->to->label, dt_comm_rank(world), (unsigned long long)read,
             (unsigned long long)need);
  /* Without them only the overlap is read: exactly the bytes of this rank's blocks. */
  dt_checkpoint_load_options skip = {.skip_data_checksum = true};
  RANK_OK(load_once(world, c, mesh, generation, &skip, &read, &need));
  RANK_CHECK(read == need, "%s -> %s: rank %d read %llu bytes, needs %llu", c->from->label,
             c->to->label, dt_comm_rank(world), (unsigned long long)read, (unsigned long long)need);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

static void temp_dir(char *buf, size_t size) {
  snprintf(buf, size, "/tmp/dt_ckpt_XXXXXX");
  cr_assert(mkdtemp(buf) != NULL);
}

static void remove_dir(const char *dir) {
  cr_assert_eq(fs_remove_tree(dir), 0, "removing %s: %s", dir, strerror(errno));
}

Test(checkpoint, reshard_every_pair_of_layouts) {
  make_layouts();
  char dir[64];
  temp_dir(dir, sizeof dir);
  for (int a = 0; a < n_layouts; a++) {
    dcp_case save = {.from = &layouts[a], .dir = dir, .generation = a};
    SPAWN_OK(layouts[a].world, save_rank, &save);
    for (int b = 0; b < n_layouts; b++) {
      dcp_case load = {.from = &layouts[a], .to = &layouts[b], .dir = dir, .generation = a};
      SPAWN_OK(layouts[b].world, load_rank, &load);
    }
  }
  remove_dir(dir);
}

Test(checkpoint, dedup_writes_each_block_once) {
  make_layouts();
  char dir[64], path[128];
  temp_dir(dir, sizeof dir);
  dcp_case save = {.from = &layouts[8] /* 2x2 R,S0 */, .dir = dir, .generation = 1};
  SPAWN_OK(4, save_rank, &save);
  /* Ranks (0,0) and (0,1) write; (1,x) are replicas of them. */
  for (int r = 0; r < 4; r++) {
    snprintf(path, sizeof path, "%s/__1_%d.safetensors", dir, r);
    cr_assert_eq(access(path, F_OK) == 0, r < 2, "rank %d's file", r);
  }
  remove_dir(dir);
}

Test(checkpoint, crash_at_each_step_leaves_old_or_new) {
  make_layouts();
  int steps[] = {DT__CKPT_STEP_BEFORE_DATA, DT__CKPT_STEP_DATA_WRITTEN, DT__CKPT_STEP_METADATA_TEMP,
                 DT__CKPT_STEP_COMMITTED};
  for (int s = 0; s < 4; s++) {
    char dir[64];
    temp_dir(dir, sizeof dir);
    dcp_case first = {.from = &layouts[7], .dir = dir, .generation = 1};
    SPAWN_OK(4, save_rank, &first);
    atomic_store(&dt__checkpoint_fail_step, steps[s]);
    dcp_case second = {.from = &layouts[3], .dir = dir, .generation = 2, .fail_step = steps[s]};
    SPAWN_OK(3, save_rank, &second);
    atomic_store(&dt__checkpoint_fail_step, 0);
    /* Before the metadata rename the old checkpoint is whole; after it the new one is. */
    bool old = steps[s] != DT__CKPT_STEP_COMMITTED;
    dcp_case load = {
        .from = &layouts[3], .to = &layouts[5], .dir = dir, .generation = 2, .expect_old = old};
    SPAWN_OK(4, load_rank, &load);
    /* A later save succeeds and cleans up what the crash left, including a temporary that a
     * crash inside dt_safetensors_save would leave. */
    char stale[128], fresh[128], user[128];
    snprintf(stale, sizeof stale, "%s/.dt-AbCdEf12", dir);
    snprintf(fresh, sizeof fresh, "%s/.dt-Writing1", dir);
    snprintf(user, sizeof user, "%s/.dt-notes.txt", dir);
    const char *made[] = {stale, fresh, user};
    for (int k = 0; k < 3; k++) {
      FILE *tmp = fopen(made[k], "w");
      cr_assert(tmp != NULL);
      fclose(tmp);
    }
    /* The crash's leftover is an hour old; another writer's temporary is being written now
     * (its time is ahead of the save's start); the user's file is old but not our form. */
    time_t now = time(NULL);
    struct timeval hour_ago[2] = {{now - 3600, 0}, {now - 3600, 0}};
    struct timeval ahead[2] = {{now + 60, 0}, {now + 60, 0}};
    cr_assert_eq(utimes(stale, hour_ago), 0);
    cr_assert_eq(utimes(user, hour_ago), 0);
    cr_assert_eq(utimes(fresh, ahead), 0);
    dcp_case third = {.from = &layouts[1], .dir = dir, .generation = 3};
    SPAWN_OK(2, save_rank, &third);
    cr_assert_neq(access(stale, F_OK), 0, "the stale temporary was removed");
    cr_assert_eq(access(fresh, F_OK), 0, "a temporary being written now is kept");
    cr_assert_eq(access(user, F_OK), 0, "a user's file that is not our temporary is kept");
    unlink(fresh);
    unlink(user);
    for (int r = 0; r < 4; r++) {
      char old_file[128];
      snprintf(old_file, sizeof old_file, "%s/__%d_%d.safetensors", dir, 1, r);
      cr_assert_neq(access(old_file, F_OK), 0, "%s was removed", old_file);
    }
    dcp_case load3 = {.from = &layouts[1], .to = &layouts[0], .dir = dir, .generation = 3};
    SPAWN_OK(1, load_rank, &load3);
    remove_dir(dir);
  }
}

Test(checkpoint, partial_or_corrupt_is_a_clear_error) {
  make_layouts();
  char dir[64], path[128];
  temp_dir(dir, sizeof dir);
  dt_tensor *t = NULL;
  cr_assert_eq(dt_zeros(2, shape_a, DT_F32, &t), DT_OK);
  const char *name = "a";
  /* No metadata at all. */
  cr_assert_eq(dt_checkpoint_load(dir, 1, &name, &t), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "metadata.json"), "%s", dt_last_error());
  dcp_case save = {.from = &layouts[1], .dir = dir, .generation = 1};
  SPAWN_OK(2, save_rank, &save);
  cr_assert_eq(dt_checkpoint_load(dir, 1, &name, &t), DT_OK, "%s", dt_last_error());
  /* Unknown name and wrong shape. */
  const char *missing = "nope";
  cr_assert_eq(dt_checkpoint_load(dir, 1, &missing, &t), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "nope"), "%s", dt_last_error());
  dt_tensor *wrong = NULL;
  cr_assert_eq(dt_zeros(2, (int64_t[]){5, 7}, DT_F32, &wrong), DT_OK);
  cr_assert_eq(dt_checkpoint_load(dir, 1, &name, &wrong), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "`a`"), "%s", dt_last_error());
  dt_tensor_release(wrong);
  /* A truncated data file. */
  snprintf(path, sizeof path, "%s/__1_1.safetensors", dir);
  cr_assert_eq(truncate(path, 40), 0);
  cr_assert_eq(dt_checkpoint_load(dir, 1, &name, &t), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "corrupt"), "%s", dt_last_error());
  /* Garbage metadata. */
  snprintf(path, sizeof path, "%s/metadata.json", dir);
  FILE *f = fopen(path, "w");
  fputs("{\"format\":\"dtensor-checkpoint\",\"version\":1,\"tensors\":[{\"name\":", f);
  fclose(f);
  cr_assert_eq(dt_checkpoint_load(dir, 1, &name, &t), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "corrupt metadata"), "%s", dt_last_error());
  cr_assert_eq(dt_checkpoint_load(NULL, 1, &name, &t), DT_ERR_INVALID);
  dt_tensor_release(t);
  remove_dir(dir);
}
