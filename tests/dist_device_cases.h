/*
 * DTensor programs on a device mesh against the same programs on a CPU mesh, for one rank of a
 * world (call dist_device_cases from every rank under dt_comm_spawn). Shared by
 * tests/test_dist_device.c (a stand-in device kind on the CPU) and
 * tests/cuda/test_cuda_dist.c (CUDA meshes on the threads backend).
 *
 * Every value is a small multiple of 0.25, so sums and products of these tensors are exact in
 * float32 in any order: the device's results must equal the CPU's bit for bit, whatever order
 * its kernels add in. Each case checks where the shards live (this rank's device of the mesh,
 * dt_mesh_device) and their bytes:
 *   - distribute_tensor and redistribute between Shard, Replicate and Partial placements on
 *     every mesh dim (all_gather, all_to_all, reduce_scatter, all_reduce, slicing, to Partial),
 *     uneven shapes (7 x 5 over 2 and 4 ranks);
 *   - ops on sharded tensors (add, mul, relu, mm with a Shard/Replicate operand, sum to a
 *     Partial result), then full_tensor;
 *   - from_local with Partial(sum), reduced by full_tensor;
 *   - the factories (ones, arange, rand: the same values as on the CPU mesh) and
 *     distribute_tensor_from (the source's verdict and tensor broadcast on the mesh's device);
 *   - refusals: a CPU tensor on the device mesh, and a device tensor on the CPU mesh.
 * Private header: RANK_CHECK reports through dt__error (comm_helpers.h).
 */
#ifndef DT_TESTS_DIST_DEVICE_CASES_H
#define DT_TESTS_DIST_DEVICE_CASES_H

#include <string.h>

#include "comm_helpers.h"

/* A rows x cols float32 tensor on the CPU whose element (i, j) is a multiple of 0.25. */
static inline dt_status ddc_matrix(int64_t rows, int64_t cols, int seed, dt_tensor **out) {
  float v[64];
  if (rows * cols > 64) return dt__error(DT_ERR_INTERNAL, "ddc_matrix: too large");
  for (int64_t i = 0; i < rows * cols; i++) {
    v[i] = (float)((i * 7 + seed * 3) % 11 - 5) + 0.25f * (float)((i + seed) % 4);
  }
  return dt_from_data(v, 2, (int64_t[]){rows, cols}, DT_F32, out);
}

/* True when a and b (any devices, any strides) have the same shape, dtype and bytes. */
static inline bool ddc_same(dt_tensor *a, dt_tensor *b, char *why, size_t size) {
  dt_tensor *ha = NULL, *hb = NULL, *ca = NULL, *cb = NULL;
  bool same = false;
  if (dt_to_device(a, DT_DEVICE_CPU_VALUE, &ha) || dt_to_device(b, DT_DEVICE_CPU_VALUE, &hb) ||
      dt_contiguous(ha, &ca) || dt_contiguous(hb, &cb)) {
    snprintf(why, size, "copy to the CPU failed: %s", dt_last_error());
  } else if (dt_tensor_ndim(ca) != dt_tensor_ndim(cb) ||
             dt_tensor_dtype(ca) != dt_tensor_dtype(cb) ||
             memcmp(dt_tensor_shape(ca), dt_tensor_shape(cb),
                    sizeof(int64_t) * (size_t)dt_tensor_ndim(ca)) != 0) {
    snprintf(why, size, "shapes or dtypes differ");
  } else {
    size_t n = (size_t)dt_tensor_numel(ca) * dt_dtype_size(dt_tensor_dtype(ca));
    same = n == 0 || memcmp(dt_tensor_data(ca), dt_tensor_data(cb), n) == 0;
    if (!same) {
      const float *x = dt_tensor_data(ca), *y = dt_tensor_data(cb);
      int64_t k = 0;
      while (k < dt_tensor_numel(ca) && x[k] == y[k]) k++;
      snprintf(why, size, "element %lld: %g against %g", (long long)k, (double)x[k], (double)y[k]);
    }
  }
  dt_tensor_release(ha);
  dt_tensor_release(hb);
  dt_tensor_release(ca);
  dt_tensor_release(cb);
  return same;
}

/* The device tensor d (distributed on the device mesh) against c (on the CPU mesh): d's shard
 * is on `device`, and the local shards and the whole tensors are equal. */
static inline dt_status ddc_check(const char *what, dt_tensor *d, dt_tensor *c, dt_device device) {
  char why[160];
  dt_tensor *ld = NULL, *lc = NULL, *fd = NULL, *fc = NULL;
  RANK_OK(dt_dist_to_local(d, &ld));
  RANK_OK(dt_dist_to_local(c, &lc));
  dt_device at = dt_tensor_device(ld);
  bool on = at.kind == device.kind && at.index == device.index;
  bool local_same = ddc_same(ld, lc, why, sizeof why);
  dt_tensor_release(ld);
  dt_tensor_release(lc);
  RANK_CHECK(on, "%s: the shard is on kind %d index %d, expected %d:%d", what, (int)at.kind,
             at.index, (int)device.kind, device.index);
  RANK_CHECK(local_same, "%s: local shards differ: %s", what, why);
  RANK_OK(dt_dist_full_tensor(d, &fd));
  RANK_OK(dt_dist_full_tensor(c, &fc));
  bool full_same = ddc_same(fd, fc, why, sizeof why);
  dt_tensor_release(fd);
  dt_tensor_release(fc);
  RANK_CHECK(full_same, "%s: full tensors differ: %s", what, why);
  return DT_OK;
}

/* Placements (for a 1-D or 2-D mesh) that the cases go through. */
typedef struct ddc_placements {
  dt_placement p[2];
} ddc_placements;

static inline int ddc_placement_sets(int ndim, ddc_placements *sets) {
  if (ndim == 1) {
    sets[0] = (ddc_placements){{dt_shard(0)}};
    sets[1] = (ddc_placements){{dt_shard(1)}};
    sets[2] = (ddc_placements){{dt_replicate()}};
    return 3;
  }
  sets[0] = (ddc_placements){{dt_shard(0), dt_shard(1)}};
  sets[1] = (ddc_placements){{dt_shard(1), dt_replicate()}};
  sets[2] = (ddc_placements){{dt_replicate(), dt_shard(0)}};
  sets[3] = (ddc_placements){{dt_shard(0), dt_shard(0)}};
  sets[4] = (ddc_placements){{dt_replicate(), dt_replicate()}};
  return 5;
}

/* Ops on tensors distributed with `p` on both meshes. */
static inline dt_status ddc_ops(dt_mesh *dm, dt_mesh *cm, dt_tensor *a_dev, dt_tensor *a_cpu,
                                const dt_placement *p, int ndim, dt_device device) {
  dt_tensor *dd = NULL, *dc = NULL, *b_cpu = NULL, *b_dev = NULL, *bd = NULL, *bc = NULL;
  RANK_OK(dt_dist_distribute_tensor(dm, a_dev, ndim, p, &dd));
  RANK_OK(dt_dist_distribute_tensor(cm, a_cpu, ndim, p, &dc));
  RANK_OK(ddc_matrix(5, 3, 2, &b_cpu));
  RANK_OK(dt_to_device(b_cpu, device, &b_dev));
  dt_placement rep[2] = {dt_replicate(), dt_replicate()};
  RANK_OK(dt_dist_distribute_tensor(dm, b_dev, ndim, rep, &bd));
  RANK_OK(dt_dist_distribute_tensor(cm, b_cpu, ndim, rep, &bc));
  dt_tensor *xd = NULL, *xc = NULL;
  RANK_OK(dt_add(dd, dd, &xd));
  RANK_OK(dt_add(dc, dc, &xc));
  RANK_OK(ddc_check("add", xd, xc, device));
  dt_tensor *yd = NULL, *yc = NULL;
  RANK_OK(dt_mul(xd, dd, &yd));
  RANK_OK(dt_mul(xc, dc, &yc));
  RANK_OK(ddc_check("mul", yd, yc, device));
  dt_tensor *rd = NULL, *rc = NULL;
  RANK_OK(dt_relu(yd, &rd));
  RANK_OK(dt_relu(yc, &rc));
  RANK_OK(ddc_check("relu", rd, rc, device));
  dt_tensor *md = NULL, *mc = NULL;
  RANK_OK(dt_mm(dd, bd, &md));
  RANK_OK(dt_mm(dc, bc, &mc));
  RANK_OK(ddc_check("mm", md, mc, device));
  dt_tensor *sd = NULL, *sc = NULL;
  RANK_OK(dt_sum(md, &sd));
  RANK_OK(dt_sum(mc, &sc));
  RANK_OK(ddc_check("sum", sd, sc, device));
  dt_tensor *all[] = {dd, dc, b_cpu, b_dev, bd, bc, xd, xc, yd, yc, rd, rc, md, mc, sd, sc};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dt_tensor_release(all[i]);
  return DT_OK;
}

/* Every redistribution between the placement sets, and to and from Partial(sum). */
static inline dt_status ddc_redistribute(dt_mesh *dm, dt_mesh *cm, dt_tensor *a_dev,
                                         dt_tensor *a_cpu, int ndim, dt_device device) {
  ddc_placements sets[8];
  int n = ddc_placement_sets(ndim, sets);
  char what[96];
  for (int i = 0; i < n; i++) {
    dt_tensor *dd = NULL, *dc = NULL;
    RANK_OK(dt_dist_distribute_tensor(dm, a_dev, ndim, sets[i].p, &dd));
    RANK_OK(dt_dist_distribute_tensor(cm, a_cpu, ndim, sets[i].p, &dc));
    snprintf(what, sizeof what, "distribute_tensor, set %d", i);
    RANK_OK(ddc_check(what, dd, dc, device));
    for (int j = 0; j < n; j++) {
      dt_tensor *rd = NULL, *rc = NULL;
      RANK_OK(dt_dist_redistribute(dd, ndim, sets[j].p, &rd));
      RANK_OK(dt_dist_redistribute(dc, ndim, sets[j].p, &rc));
      snprintf(what, sizeof what, "redistribute set %d -> set %d", i, j);
      RANK_OK(ddc_check(what, rd, rc, device));
      dt_tensor_release(rd);
      dt_tensor_release(rc);
    }
    /* Through Partial(sum) on the last mesh dim: R -> P -> this set. */
    dt_placement partial[2] = {dt_replicate(), dt_replicate()};
    partial[ndim - 1] = dt_partial(DT_REDUCE_SUM);
    dt_tensor *rd = NULL, *rc = NULL, *pd = NULL, *pc = NULL, *bd = NULL, *bc = NULL;
    RANK_OK(dt_dist_redistribute(dd, ndim, (dt_placement[]){dt_replicate(), dt_replicate()}, &rd));
    RANK_OK(dt_dist_redistribute(dc, ndim, (dt_placement[]){dt_replicate(), dt_replicate()}, &rc));
    RANK_OK(dt_dist_redistribute(rd, ndim, partial, &pd));
    RANK_OK(dt_dist_redistribute(rc, ndim, partial, &pc));
    snprintf(what, sizeof what, "to Partial(sum), set %d", i);
    RANK_OK(ddc_check(what, pd, pc, device));
    RANK_OK(dt_dist_redistribute(pd, ndim, sets[i].p, &bd));
    RANK_OK(dt_dist_redistribute(pc, ndim, sets[i].p, &bc));
    snprintf(what, sizeof what, "Partial(sum) -> set %d", i);
    RANK_OK(ddc_check(what, bd, bc, device));
    dt_tensor *all[] = {dd, dc, rd, rc, pd, pc, bd, bc};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) dt_tensor_release(all[k]);
  }
  return DT_OK;
}

/* from_local with Partial(sum): each rank's own term, summed by full_tensor. */
static inline dt_status ddc_partial_from_local(dt_mesh *dm, dt_mesh *cm, int rank, int ndim,
                                               dt_device device) {
  dt_tensor *lc = NULL, *ld = NULL, *dd = NULL, *dc = NULL;
  RANK_OK(ddc_matrix(3, 4, rank + 5, &lc));
  RANK_OK(dt_to_device(lc, device, &ld));
  dt_placement p[2] = {dt_partial(DT_REDUCE_SUM), dt_partial(DT_REDUCE_SUM)};
  RANK_OK(dt_dist_from_local(dm, ld, ndim, p, NULL, &dd));
  RANK_OK(dt_dist_from_local(cm, lc, ndim, p, NULL, &dc));
  RANK_OK(ddc_check("from_local Partial(sum)", dd, dc, device));
  dt_tensor *all[] = {lc, ld, dd, dc};
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) dt_tensor_release(all[k]);
  return DT_OK;
}

/* Factories: the same values on both meshes, on this rank's device. */
static inline dt_status ddc_factories(dt_mesh *dm, dt_mesh *cm, int ndim, dt_device device) {
  dt_placement p[2] = {dt_shard(0), dt_shard(1)};
  if (ndim == 1) p[0] = dt_shard(1);
  int64_t shape[2] = {6, 5};
  dt_tensor *d = NULL, *c = NULL;
  RANK_OK(dt_dist_rand(dm, 2, shape, DT_F32, 42, ndim, p, &d));
  RANK_OK(dt_dist_rand(cm, 2, shape, DT_F32, 42, ndim, p, &c));
  RANK_OK(ddc_check("dt_dist_rand", d, c, device));
  dt_tensor_release(d);
  dt_tensor_release(c);
  RANK_OK(dt_dist_ones(dm, 2, shape, DT_F32, ndim, p, &d));
  RANK_OK(dt_dist_ones(cm, 2, shape, DT_F32, ndim, p, &c));
  RANK_OK(ddc_check("dt_dist_ones", d, c, device));
  dt_tensor_release(d);
  dt_tensor_release(c);
  dt_placement q[2] = {dt_shard(0), dt_shard(0)};
  RANK_OK(dt_dist_arange(dm, 0, 9, 1, DT_F32, ndim, q, &d));
  RANK_OK(dt_dist_arange(cm, 0, 9, 1, DT_F32, ndim, q, &c));
  RANK_OK(ddc_check("dt_dist_arange", d, c, device));
  dt_tensor_release(d);
  dt_tensor_release(c);
  return DT_OK;
}

/* distribute_tensor_from: rank 0's tensor (on its device of the mesh) broadcast and sharded;
 * the other ranks pass none. */
static inline dt_status ddc_from_source(dt_mesh *dm, dt_mesh *cm, dt_tensor *a_dev,
                                        dt_tensor *a_cpu, int rank, int ndim, dt_device device) {
  dt_placement p[2] = {dt_shard(1), dt_shard(0)};
  const int64_t *shape = dt_tensor_shape(a_cpu);
  dt_tensor *d = NULL, *c = NULL;
  RANK_OK(dt_dist_distribute_tensor_from(dm, rank == 0 ? a_dev : NULL, 0, 2, shape, DT_F32, ndim, p,
                                         &d));
  RANK_OK(dt_dist_distribute_tensor_from(cm, rank == 0 ? a_cpu : NULL, 0, 2, shape, DT_F32, ndim, p,
                                         &c));
  RANK_OK(ddc_check("distribute_tensor_from", d, c, device));
  dt_tensor_release(d);
  dt_tensor_release(c);
  return DT_OK;
}

/* A CPU tensor on the device mesh and a device tensor on the CPU mesh: refused, naming the
 * function and both devices. */
static inline dt_status ddc_refusals(dt_mesh *dm, dt_mesh *cm, dt_tensor *a_dev, dt_tensor *a_cpu,
                                     int ndim) {
  dt_placement p[2] = {dt_replicate(), dt_replicate()};
  dt_tensor *d = NULL;
  dt_status st = dt_dist_distribute_tensor(dm, a_cpu, ndim, p, &d);
  RANK_CHECK(st == DT_ERR_INVALID && d == NULL, "CPU tensor on a device mesh: %s",
             dt_status_string(st));
  RANK_CHECK(strstr(dt_last_error(), "dt_dist_distribute_tensor") && strstr(dt_last_error(), "cpu"),
             "%s", dt_last_error());
  st = dt_dist_from_local(cm, a_dev, ndim, p, NULL, &d);
  RANK_CHECK(st == DT_ERR_INVALID && d == NULL, "device tensor on a CPU mesh: %s",
             dt_status_string(st));
  RANK_CHECK(strstr(dt_last_error(), "dt_dist_from_local") && strstr(dt_last_error(), "cpu mesh"),
             "%s", dt_last_error());
  return DT_OK;
}

/* Everything above, on a mesh of `kind` ("cuda", ...) of ndim dims (shape) over world, against
 * a CPU mesh over cpu_world (world itself, or the bootstrap world of an NCCL group, which moves
 * GPU memory only). */
static inline dt_status dist_device_cases(dt_comm *world, dt_comm *cpu_world, const char *kind,
                                          int ndim, const int *shape) {
  dt_mesh *dm = NULL, *cm = NULL;
  RANK_OK(dt_mesh_create_on(kind, world, ndim, shape, NULL, &dm));
  RANK_OK(dt_mesh_create(cpu_world, ndim, shape, NULL, &cm));
  dt_device device = dt_mesh_device(dm);
  RANK_CHECK(strcmp(dt_device_kind_name((int)device.kind), kind) == 0, "mesh device kind %s",
             dt_device_kind_name((int)device.kind));
  dt_tensor *a_cpu = NULL, *a_dev = NULL;
  RANK_OK(ddc_matrix(7, 5, 1, &a_cpu));
  RANK_OK(dt_to_device(a_cpu, device, &a_dev));
  dt_status st = ddc_redistribute(dm, cm, a_dev, a_cpu, ndim, device);
  if (!st) {
    ddc_placements sets[8];
    int n = ddc_placement_sets(ndim, sets);
    for (int i = 0; i < n && !st; i++) st = ddc_ops(dm, cm, a_dev, a_cpu, sets[i].p, ndim, device);
  }
  if (!st) st = ddc_partial_from_local(dm, cm, dt_comm_rank(world), ndim, device);
  if (!st) st = ddc_factories(dm, cm, ndim, device);
  if (!st) st = ddc_from_source(dm, cm, a_dev, a_cpu, dt_comm_rank(world), ndim, device);
  if (!st) st = ddc_refusals(dm, cm, a_dev, a_cpu, ndim);
  dt_tensor_release(a_cpu);
  dt_tensor_release(a_dev);
  dt_mesh_destroy(dm);
  dt_mesh_destroy(cm);
  return st;
}

#endif /* DT_TESTS_DIST_DEVICE_CASES_H */
