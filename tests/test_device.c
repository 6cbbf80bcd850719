/*
 * Devices: the device of a tensor, copies between devices, refusals of mixed devices and of
 * ops a device lacks, and host code that never reads a device's memory.
 *
 * Includes kernels/kernel_table.h and tensor/device_impl.h because the only way to exercise a
 * second device without a GPU is to register one: a "mirror" kind (host memory the library
 * must treat as unreadable, behind its own allocator that counts blocks) with a kernel table
 * of a few ops, in two run-time slots (mirror and mirror2, to copy between two kinds).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/dtensor.h"
#include "kernels/kernel_table.h"
#include "tensor/device_impl.h"

#define MIRROR DT__DEVICE_RUNTIME_KIND
#define MIRROR2 (DT__DEVICE_RUNTIME_KIND + 1)

static int live_blocks;
static size_t copied_bytes;

static int mirror_count(void) { return 2; }
static void *mirror_alloc(int index, size_t nbytes) {
  (void)index;
  void *p = malloc(nbytes);
  if (p) live_blocks++;
  return p;
}
static void mirror_free(int index, void *p) {
  (void)index;
  live_blocks--;
  free(p);
}
static dt_status mirror_copy(void *dst, const void *src, size_t n) {
  memcpy(dst, src, n);
  copied_bytes += n;
  return DT_OK;
}
static dt_status mirror_to_host(int index, void *host, const void *dev, size_t n) {
  (void)index;
  return mirror_copy(host, dev, n);
}
static dt_status mirror_from_host(int index, void *dev, const void *host, size_t n) {
  (void)index;
  return mirror_copy(dev, host, n);
}
static dt_status mirror_within(int di, void *dst, int si, const void *src, size_t n) {
  (void)di, (void)si;
  return mirror_copy(dst, src, n);
}

static const dt_device_memory mirror_memory = {.name = "mirror",
                                               .host_accessible = false,
                                               .count = mirror_count,
                                               .alloc = mirror_alloc,
                                               .free = mirror_free,
                                               .to_host = mirror_to_host,
                                               .from_host = mirror_from_host,
                                               .within = mirror_within};
/* The second kind: the same memory under another name. */
static dt_device_memory mirror2_memory;

/* The mirror's memory is host memory, so the CPU's kernels compute on it; it registers a few
 * of them and lacks the rest (mul among them). */
static void register_mirror(void) {
  static const dt_op ops[] = {DT_OP_ADD,       DT_OP_CONTIGUOUS, DT_OP_CLONE,
                              DT_OP_TRANSPOSE, DT_OP_DETACH,     DT_OP_SUM};
  dt_op_kernel_fn table[DT_OP_COUNT] = {0};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) table[ops[i]] = dt__cpu_kernels[ops[i]];
  cr_assert_eq(dt__device_register_memory(MIRROR, &mirror_memory), DT_OK);
  mirror2_memory = mirror_memory;
  mirror2_memory.name = "mirror2";
  cr_assert_eq(dt__device_register_memory(MIRROR2, &mirror2_memory), DT_OK);
  cr_assert_eq(dt__kernels_register(MIRROR, table), DT_OK);
  cr_assert_eq(dt__kernels_register(MIRROR2, table), DT_OK);
}

static void unregister_mirror(void) {
  cr_assert_eq(live_blocks, 0, "%d mirror blocks leaked", live_blocks);
  dt__kernels_register(MIRROR, NULL);
  dt__kernels_register(MIRROR2, NULL);
  dt__device_register_memory(MIRROR, NULL);
  dt__device_register_memory(MIRROR2, NULL);
}

TestSuite(device, .init = register_mirror, .fini = unregister_mirror);

static const dt_device mirror0 = {(dt_device_kind)MIRROR, 0};

static dt_tensor *cpu_tensor(int ndim, const int64_t *shape, const float *values) {
  dt_tensor *t = NULL;
  cr_assert_eq(dt_from_data(values, ndim, shape, DT_F32, &t), DT_OK, "%s", dt_last_error());
  return t;
}

/* t's values, brought to the CPU through dt_to_device. */
static void host_values(dt_tensor *t, float *out, int64_t n) {
  dt_tensor *h = NULL;
  cr_assert_eq(dt_to_device(t, DT_DEVICE_CPU_VALUE, &h), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_device(h).kind, DT_DEVICE_CPU);
  cr_assert_eq(dt_tensor_numel(h), n);
  memcpy(out, dt_tensor_data(h), sizeof(float) * (size_t)n);
  dt_tensor_release(h);
}

Test(device, names_parse_and_availability) {
  char buf[32];
  cr_assert_str_eq(dt_device_format(DT_DEVICE_CPU_VALUE, buf, sizeof buf), "cpu");
  cr_assert_str_eq(dt_device_format((dt_device){DT_DEVICE_CUDA, 1}, buf, sizeof buf), "cuda:1");
  cr_assert_str_eq(dt_device_format(mirror0, buf, sizeof buf), "mirror:0");
  dt_device d;
  cr_assert_eq(dt_device_parse("cuda:3", &d), DT_OK);
  cr_assert(d.kind == DT_DEVICE_CUDA && d.index == 3);
  cr_assert_eq(dt_device_parse("mirror", &d), DT_OK);
  cr_assert(d.kind == (dt_device_kind)MIRROR && d.index == 0);
  cr_assert_eq(dt_device_parse("tpu", &d), DT_ERR_INVALID);
  cr_assert_eq(dt_device_parse("cpu:1", &d), DT_ERR_INVALID);
  cr_assert_eq(dt_device_parse("cuda:x", &d), DT_ERR_INVALID);
  cr_assert(dt_device_available(DT_DEVICE_CPU_VALUE));
  cr_assert(dt_device_available(mirror0));
  cr_assert_not(dt_device_available((dt_device){(dt_device_kind)MIRROR, 2}));
  cr_assert_eq(dt_tensor_device(NULL).kind, DT_DEVICE_CPU);
  /* A kind no device registered: said once, with its number. */
  dt_tensor *t = NULL;
  dt_tensor_options o = {.device = {(dt_device_kind)(MIRROR2 + 1), 0}};
  cr_assert_eq(dt_empty_ex(1, (int64_t[]){2}, DT_F32, &o, &t), DT_ERR_UNSUPPORTED);
  cr_assert(strstr(dt_last_error(), "no device of kind") &&
                !strstr(dt_last_error(), "device device"),
            "%s", dt_last_error());
}

/* A build without CUDA says how to build it; a CUDA build without a GPU says there is none
 * (tests/cuda/ covers a machine with one). */
Test(device, cuda_is_refused_without_the_build_or_a_device) {
  int n = 0;
  bool built = dt_cuda_device_count(&n) == DT_OK;
  if (n > 0) return;
  dt_tensor *t = NULL;
  dt_tensor_options cuda = {.device = {DT_DEVICE_CUDA, 0}};
  cr_assert_not(dt_device_available(cuda.device));
  cr_assert_eq(dt_empty_ex(1, (int64_t[]){4}, DT_F32, &cuda, &t), DT_ERR_UNSUPPORTED);
  cr_assert_null(t);
  cr_assert(strstr(dt_last_error(), "cuda:0") &&
                strstr(dt_last_error(), built ? "no CUDA device" : "DT_WITH_CUDA"),
            "%s", dt_last_error());
  dt_tensor *c = cpu_tensor(1, (int64_t[]){2}, (float[]){1, 2});
  cr_assert_eq(dt_to_device(c, cuda.device, &t), DT_ERR_UNSUPPORTED);
  cr_assert_null(t);
  dt_tensor_release(c);
}

Test(device, factories_allocate_through_the_device_and_free_through_it) {
  dt_tensor_options on = {.device = mirror0};
  dt_tensor *e = NULL, *f = NULL, *z = NULL;
  cr_assert_eq(dt_empty_ex(2, (int64_t[]){2, 3}, DT_F32, &on, &e), DT_OK, "%s", dt_last_error());
  cr_assert_eq(live_blocks, 1);
  cr_assert_eq(dt_tensor_device(e).kind, (dt_device_kind)MIRROR);
  cr_assert_eq(dt_full_ex(1, (int64_t[]){5}, 2.5, DT_F32, &on, &f), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_full_ex(1, (int64_t[]){5}, 0, DT_F32, NULL, &z), DT_OK); /* NULL: the CPU */
  cr_assert_eq(dt_tensor_device(z).kind, DT_DEVICE_CPU);
  cr_assert_eq(live_blocks, 2);
  float v[5];
  host_values(f, v, 5);
  for (int i = 0; i < 5; i++) cr_assert_eq(v[i], 2.5f);
  /* A view shares its base's device; the block goes with the last reference. */
  dt_tensor *tv = NULL;
  cr_assert_eq(dt_transpose(e, 0, 1, &tv), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_device(tv).kind, (dt_device_kind)MIRROR);
  dt_tensor_release(e);
  cr_assert_eq(live_blocks, 2);
  dt_tensor_release(tv);
  dt_tensor_release(f);
  dt_tensor_release(z);
  cr_assert_eq(live_blocks, 0);
}

Test(device, host_code_never_reads_device_memory) {
  float values[4] = {1, 2, 3, 4};
  dt_tensor *m = NULL;
  dt_tensor_options on = {.device = mirror0};
  cr_assert_eq(dt_from_data_ex(values, 1, (int64_t[]){4}, DT_F32, &on, &m), DT_OK);
  cr_assert_null(dt_tensor_data(m));
  cr_assert(strstr(dt_last_error(), "mirror:0") && strstr(dt_last_error(), "dt_to_device"), "%s",
            dt_last_error());
  double d[4], x;
  char buf[64];
  cr_assert_eq(dt_tensor_to_doubles(m, d, 4), DT_ERR_UNSUPPORTED);
  cr_assert_eq(dt_tensor_get(m, (int64_t[]){0}, &x), DT_ERR_UNSUPPORTED);
  cr_assert_eq(dt_tensor_set(m, (int64_t[]){0}, 1.0), DT_ERR_UNSUPPORTED);
  cr_assert_eq(dt_tensor_format(m, buf, sizeof buf), DT_ERR_UNSUPPORTED);
  cr_assert_eq(dt_safetensors_save("/nonexistent/never.safetensors", 1, (const char *[]){"w"},
                                   (dt_tensor *[]){m}, 0, NULL, NULL),
               DT_ERR_UNSUPPORTED);
  cr_assert(strstr(dt_last_error(), "`w`") && strstr(dt_last_error(), "mirror:0"), "%s",
            dt_last_error());
  struct DLManagedTensor *dl = NULL;
  dt_status st = dt_dlpack_export(m, &dl);
  cr_assert(st == DT_ERR_UNSUPPORTED, "%s", dt_last_error());
  cr_assert_null(dl);
  float back[4];
  host_values(m, back, 4);
  cr_assert_arr_eq(back, values, sizeof values);
  dt_tensor_release(m);
}

Test(device, to_device_copies_any_layout_and_returns_self_on_the_same_device) {
  /* A transposed view: the copy is its contiguous [3, 2] layout. */
  float values[6] = {0, 1, 2, 3, 4, 5};
  dt_tensor *c = cpu_tensor(2, (int64_t[]){2, 3}, values), *ct = NULL, *m = NULL, *same = NULL;
  cr_assert_eq(dt_transpose(c, 0, 1, &ct), DT_OK);
  copied_bytes = 0;
  cr_assert_eq(dt_to_device(ct, mirror0, &m), DT_OK, "%s", dt_last_error());
  cr_assert_eq(copied_bytes, sizeof values);
  cr_assert(dt_tensor_is_contiguous(m));
  cr_assert_eq(dt_tensor_size(m, 0), 3);
  float got[6];
  host_values(m, got, 6);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++) cr_assert_eq(got[i * 2 + j], values[j * 3 + i]);
  cr_assert_eq(dt_to_device(m, mirror0, &same), DT_OK);
  cr_assert_eq(same, m);
  dt_tensor_release(same);
  /* Between two device kinds: staged through the host, values kept. */
  dt_tensor *m2 = NULL;
  cr_assert_eq(dt_to_device(m, (dt_device){(dt_device_kind)MIRROR2, 1}, &m2), DT_OK, "%s",
               dt_last_error());
  char buf[32];
  cr_assert_str_eq(dt_device_format(dt_tensor_device(m2), buf, sizeof buf), "mirror2:1");
  float got2[6];
  host_values(m2, got2, 6);
  cr_assert_arr_eq(got2, got, sizeof got);
  dt_tensor_release(m2);
  dt_tensor_release(m);
  dt_tensor_release(ct);
  dt_tensor_release(c);
}

Test(device, ops_run_on_their_device_and_refuse_mixed_or_missing) {
  float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
  dt_tensor *ca = cpu_tensor(1, (int64_t[]){4}, a), *cb = cpu_tensor(1, (int64_t[]){4}, b);
  dt_tensor *ma = NULL, *mb = NULL, *sum = NULL, *out = NULL;
  cr_assert_eq(dt_to_device(ca, mirror0, &ma), DT_OK);
  cr_assert_eq(dt_to_device(cb, mirror0, &mb), DT_OK);
  cr_assert_eq(dt_add(ma, mb, &sum), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_tensor_device(sum).kind, (dt_device_kind)MIRROR);
  float got[4];
  host_values(sum, got, 4);
  for (int i = 0; i < 4; i++) cr_assert_eq(got[i], a[i] + b[i]);
  /* Mixed devices: refused, naming both, no output. */
  cr_assert_eq(dt_add(ca, mb, &out), DT_ERR_INVALID);
  cr_assert_null(out);
  cr_assert(strstr(dt_last_error(), "add.Tensor") && strstr(dt_last_error(), "cpu") &&
                strstr(dt_last_error(), "mirror:0") && strstr(dt_last_error(), "same device"),
            "%s", dt_last_error());
  /* An op the device lacks: refused naming the op and the device; the output is released. */
  int before = live_blocks;
  cr_assert_eq(dt_mul(ma, mb, &out), DT_ERR_UNSUPPORTED);
  cr_assert_null(out);
  cr_assert_eq(live_blocks, before);
  cr_assert(strstr(dt_last_error(), "mul.Tensor") && strstr(dt_last_error(), "mirror:0"), "%s",
            dt_last_error());
  cr_assert_not(dt__device_has_kernel(MIRROR, DT_OP_MUL));
  cr_assert(dt__device_has_kernel(MIRROR, DT_OP_ADD));
  dt_tensor_release(sum);
  dt_tensor_release(ma);
  dt_tensor_release(mb);
  dt_tensor_release(ca);
  dt_tensor_release(cb);
}

Test(device, meshes_and_collectives_check_the_device) {
  dt_comm *world = NULL;
  cr_assert_eq(
      dt_comm_init(&(dt_comm_options){.backend = "fake", .rank = 0, .world_size = 2}, &world),
      DT_OK);
  dt_mesh *mesh = NULL, *none = NULL;
  cr_assert_eq(dt_mesh_create_on("mirror", world, 1, (int[]){2}, NULL, &none), DT_ERR_UNSUPPORTED);
  cr_assert(strstr(dt_last_error(), "fake backend") && strstr(dt_last_error(), "mirror"), "%s",
            dt_last_error());
  if (!dt_cuda_is_available()) /* no device: refused whatever the backend */
    cr_assert_eq(dt_mesh_create_on("cuda", world, 1, (int[]){2}, NULL, &none), DT_ERR_UNSUPPORTED);
  cr_assert_eq(dt_mesh_create_on("cpu:0", world, 1, (int[]){2}, NULL, &none), DT_ERR_INVALID);
  cr_assert_null(none);
  cr_assert_eq(dt_mesh_create_on("cpu", world, 1, (int[]){2}, NULL, &mesh), DT_OK, "%s",
               dt_last_error());
  cr_assert_eq(dt_mesh_device_kind(mesh), DT_DEVICE_CPU);
  float v[4] = {1, 2, 3, 4};
  dt_tensor *m = NULL, *d = NULL;
  dt_tensor_options on = {.device = mirror0};
  cr_assert_eq(dt_from_data_ex(v, 1, (int64_t[]){4}, DT_F32, &on, &m), DT_OK);
  dt_placement shard = dt_shard(0);
  cr_assert_eq(dt_dist_distribute_tensor(mesh, m, 1, &shard, &d), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "mirror:0") && strstr(dt_last_error(), "cpu mesh"), "%s",
            dt_last_error());
  cr_assert_eq(dt_dist_from_local(mesh, m, 1, &shard, NULL, &d), DT_ERR_INVALID);
  cr_assert_null(d);
  cr_assert_eq(dt_comm_all_reduce(world, m, DT_REDUCE_SUM), DT_ERR_UNSUPPORTED);
  cr_assert(strstr(dt_last_error(), "mirror:0") && strstr(dt_last_error(), "fake"), "%s",
            dt_last_error());
  dt_tensor_release(m);
  dt_mesh_destroy(mesh);
  dt_comm_destroy(world);
}
