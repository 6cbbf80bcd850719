/* Activation checkpointing per module (dt_module_set_checkpoint): gradients of the parameters
 * and of the input are bitwise those of the plain backward (also nested, and with an input
 * that does not require grad), the bytes alive after forward + loss shrink (a counting
 * allocator), and a checkpointed module still trains on 2 tensor-parallel ranks. */
#include <criterion/criterion.h>
#include <stdatomic.h>

#include "comm_helpers.h"
#include "dtensor/parallel.h"
#include "counting_alloc.h" /* live_bytes, peak_bytes, live_blocks */

#define BLOCKS 4
#define WIDTH 64
#define WIDE 256
#define ROWS 32

static dt_status requires_grad(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  (void)fqn;
  (void)user;
  return is_buffer ? DT_OK : dt_tensor_set_requires_grad(t, true);
}

/* BLOCKS x Sequential(Linear(64, 256), GELU, Linear(256, 64), ReLU). */
static dt_module *build_model(int checkpoint) {
  dt_module *blocks[BLOCKS];
  for (int b = 0; b < BLOCKS; b++) {
    dt_module *c[4];
    cr_assert_eq(dt_nn_linear(WIDTH, WIDE, true, 100 + 2 * (uint64_t)b, &c[0]), DT_OK);
    cr_assert_eq(dt_nn_gelu(&c[1]), DT_OK);
    cr_assert_eq(dt_nn_linear(WIDE, WIDTH, true, 101 + 2 * (uint64_t)b, &c[2]), DT_OK);
    cr_assert_eq(dt_nn_relu(&c[3]), DT_OK);
    cr_assert_eq(dt_nn_sequential(4, c, &blocks[b]), DT_OK);
    if (checkpoint & 1) cr_assert_eq(dt_module_set_checkpoint(blocks[b], true), DT_OK);
  }
  dt_module *model = NULL;
  cr_assert_eq(dt_nn_sequential(BLOCKS, blocks, &model), DT_OK);
  if (checkpoint & 2) cr_assert_eq(dt_module_set_checkpoint(model, true), DT_OK);
  cr_assert_eq(dt_module_visit_tensors(model, requires_grad, NULL), DT_OK);
  return model;
}

typedef struct grads {
  int n;
  float *g[2 * BLOCKS * 2];
  int64_t numel[2 * BLOCKS * 2];
} grads;

static dt_status take_grad(const char *fqn, dt_tensor *t, bool is_buffer, void *user) {
  grads *gs = user;
  if (is_buffer) return DT_OK;
  dt_tensor *g = NULL;
  dt_status st = dt_tensor_grad(t, &g);
  if (st || !g) return st ? st : dt__error(DT_ERR_INTERNAL, "%s has no gradient", fqn);
  gs->numel[gs->n] = dt_tensor_numel(g);
  gs->g[gs->n] = malloc(sizeof(float) * (size_t)gs->numel[gs->n]);
  memcpy(gs->g[gs->n], dt_tensor_data(g), sizeof(float) * (size_t)gs->numel[gs->n]);
  gs->n++;
  dt_tensor_release(g);
  return DT_OK;
}

/* One forward + mse + backward; the parameters' and (when it requires grad) input's grads. */
static void run(int checkpoint, bool input_grad, grads *out, float *x_grad) {
  dt_module *model = build_model(checkpoint);
  dt_tensor *x = NULL, *target = NULL, *y = NULL, *loss = NULL;
  cr_assert_eq(dt_randn(2, (int64_t[]){ROWS, WIDTH}, DT_F32, 7, &x), DT_OK);
  cr_assert_eq(dt_randn(2, (int64_t[]){ROWS, WIDTH}, DT_F32, 8, &target), DT_OK);
  if (input_grad) cr_assert_eq(dt_tensor_set_requires_grad(x, true), DT_OK);
  cr_assert_eq(dt_module_forward(model, x, &y), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_mse_loss(y, target, DT_LOSS_MEAN, &loss), DT_OK);
  cr_assert_eq(dt_backward(loss, NULL), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_module_visit_tensors(model, take_grad, out), DT_OK, "%s", dt_last_error());
  if (input_grad) {
    dt_tensor *g = NULL;
    cr_assert_eq(dt_tensor_grad(x, &g), DT_OK);
    cr_assert_not_null(g);
    memcpy(x_grad, dt_tensor_data(g), sizeof(float) * ROWS * WIDTH);
    dt_tensor_release(g);
  }
  dt_tensor_release(y);
  dt_tensor_release(loss);
  dt_tensor_release(x);
  dt_tensor_release(target);
  dt_module_destroy(model);
}

static void free_grads(grads *g) {
  for (int i = 0; i < g->n; i++) free(g->g[i]);
}

Test(activation_checkpoint, gradients_are_bitwise_the_plain_ones) {
  static float x_plain[ROWS * WIDTH], x_ckpt[ROWS * WIDTH];
  for (int input_grad = 0; input_grad <= 1; input_grad++) {
    grads plain = {0};
    run(0, input_grad, &plain, x_plain);
    /* 1: each block; 2: the whole model; 3: both (nested recomputation). */
    for (int mode = 1; mode <= 3; mode++) {
      grads ckpt = {0};
      run(mode, input_grad, &ckpt, x_ckpt);
      cr_assert_eq(ckpt.n, plain.n);
      for (int i = 0; i < plain.n; i++) {
        cr_assert_eq(ckpt.numel[i], plain.numel[i]);
        cr_assert(memcmp(ckpt.g[i], plain.g[i], sizeof(float) * (size_t)plain.numel[i]) == 0,
                  "mode %d, input grad %d: parameter %d differs", mode, input_grad, i);
      }
      if (input_grad)
        cr_assert(memcmp(x_ckpt, x_plain, sizeof x_plain) == 0, "mode %d: input grad", mode);
      free_grads(&ckpt);
    }
    free_grads(&plain);
  }
}

/* Bytes alive after forward + loss (the graph holds what backward needs). */
static long long live_after_forward(int checkpoint) {
  dt_module *model = build_model(checkpoint);
  dt_tensor *x = NULL, *target = NULL, *y = NULL, *loss = NULL;
  cr_assert_eq(dt_randn(2, (int64_t[]){ROWS, WIDTH}, DT_F32, 7, &x), DT_OK);
  cr_assert_eq(dt_randn(2, (int64_t[]){ROWS, WIDTH}, DT_F32, 8, &target), DT_OK);
  /* A first step warms up what the library allocates once per thread. */
  cr_assert_eq(dt_module_forward(model, x, &y), DT_OK);
  cr_assert_eq(dt_mse_loss(y, target, DT_LOSS_MEAN, &loss), DT_OK);
  cr_assert_eq(dt_backward(loss, NULL), DT_OK);
  dt_tensor_release(y);
  dt_tensor_release(loss);
  long long before = atomic_load(&live_bytes);
  cr_assert_eq(dt_module_forward(model, x, &y), DT_OK);
  cr_assert_eq(dt_mse_loss(y, target, DT_LOSS_MEAN, &loss), DT_OK);
  long long after = atomic_load(&live_bytes) - before;
  cr_assert_eq(dt_backward(loss, NULL), DT_OK);
  dt_tensor_release(y);
  dt_tensor_release(loss);
  dt_tensor_release(x);
  dt_tensor_release(target);
  dt_module_destroy(model);
  return after;
}

Test(activation_checkpoint, fewer_bytes_alive_after_forward) {
  dt_set_allocator(&(dt_allocator){count_alloc, count_free, NULL});
  long long plain = live_after_forward(0), blocks = live_after_forward(1);
  dt_set_allocator(NULL);
  /* Plain: each block keeps its input, both Linear outputs, the GELU output... ([32, 256]
   * floats are 32 KB each); checkpointed: each block keeps only its input ([32, 64], 8 KB). */
  cr_log_info("live after forward: plain %lld B, checkpointed blocks %lld B", plain, blocks);
  cr_assert(blocks * 3 < plain, "checkpointed %lld B vs plain %lld B", blocks, plain);
  cr_assert(blocks >= BLOCKS * ROWS * WIDTH * 4, "checkpointed %lld B: less than the inputs",
            blocks);
}

Test(activation_checkpoint, refusals) {
  cr_assert_eq(dt_module_set_checkpoint(NULL, true), DT_ERR_INVALID);
  dt_module *list = NULL, *relu = NULL;
  cr_assert_eq(dt_nn_relu(&relu), DT_OK);
  cr_assert_eq(dt_nn_module_list(1, &relu, &list), DT_OK);
  cr_assert_eq(dt_module_set_checkpoint(list, true), DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "no forward"), "%s", dt_last_error());
  cr_assert(!dt_module_checkpointed(list));
  cr_assert_eq(dt_module_set_checkpoint(list, false), DT_OK);
  dt_module_destroy(list);
}

/* Tensor parallel on 2 ranks (colwise then rowwise Linear in a checkpointed block): the same
 * gradients as without checkpointing, bitwise, on every rank. */
static dt_status tp_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  float *first = NULL;
  int64_t numel = 0;
  for (int checkpoint = 0; checkpoint <= 1; checkpoint++) {
    dt_module *mlp = NULL, *model = NULL;
    RANK_OK(dt_nn_mlp(WIDTH, WIDE, WIDTH, true, true, 3, &mlp));
    if (checkpoint) RANK_OK(dt_module_set_checkpoint(mlp, true));
    RANK_OK(dt_nn_sequential(1, &mlp, &model));
    dt_tp_plan plan = {2, (dt_tp_plan_entry[]){{"0.0", DT_TP_COLWISE}, {"0.2", DT_TP_ROWWISE}}};
    RANK_OK(dt_parallel_tp_module(model, mesh, &plan, NULL));
    RANK_OK(dt_module_visit_tensors(model, requires_grad, NULL));
    dt_tensor *x = NULL, *y = NULL, *loss = NULL, *g = NULL, *local = NULL;
    RANK_OK(dt_randn(2, (int64_t[]){ROWS, WIDTH}, DT_F32, 7, &x));
    RANK_OK(dt_module_forward(model, x, &y));
    RANK_OK(dt_sum(y, &loss));
    RANK_OK(dt_backward(loss, NULL));
    RANK_OK(dt_tensor_grad(dt_module_get_tensor(model, "0.0.weight"), &g));
    RANK_CHECK(g != NULL, "no gradient");
    RANK_OK(dt_dist_to_local(g, &local));
    if (!first) {
      numel = dt_tensor_numel(local);
      first = malloc(sizeof(float) * (size_t)numel);
      memcpy(first, dt_tensor_data(local), sizeof(float) * (size_t)numel);
    } else {
      RANK_CHECK(dt_tensor_numel(local) == numel &&
                     memcmp(first, dt_tensor_data(local), sizeof(float) * (size_t)numel) == 0,
                 "the colwise weight's gradient differs with checkpointing");
    }
    dt_tensor_release(local);
    dt_tensor_release(g);
    dt_tensor_release(x);
    dt_tensor_release(y);
    dt_tensor_release(loss);
    dt_module_destroy(model);
  }
  free(first);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(activation_checkpoint, tensor_parallel_two_ranks) { SPAWN_OK(2, tp_rank, NULL); }
