/* The checkpoint API under hostile use: dt_checkpoint_load into a target of another
 * shape said only "float32 of 2 dims ... float32 of 2 dims (or a dim differs)"; it now names
 * both shapes. Also pinned: the target is left unchanged. */
#include <criterion/criterion.h>
#include <unistd.h>

#include "comm_helpers.h"
#include "fs_helpers.h"

static char dir[128];

static dt_status save_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, NULL, &mesh));
  float v[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  dt_tensor *full = NULL, *d = NULL;
  RANK_OK(dt_from_data(v, 2, (int64_t[]){3, 4}, DT_F32, &full));
  RANK_OK(dt_dist_distribute_tensor(mesh, full, 1, (dt_placement[]){dt_shard(0)}, &d));
  RANK_OK(dt_checkpoint_save(dir, mesh, 1, (const char *[]){"w"}, (dt_tensor *[]){d}));
  dt_tensor_release(d);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(checkpoint_load_errors, load_shape_mismatch_names_both_shapes) {
  snprintf(dir, sizeof dir, "/tmp/dt_review_ckpt_%d", (int)getpid());
  SPAWN_OK(2, save_rank, NULL);
  float z[8] = {0};
  dt_tensor *wrong = NULL;
  cr_assert_eq(dt_from_data(z, 2, (int64_t[]){2, 4}, DT_F32, &wrong), DT_OK);
  cr_assert_eq(dt_checkpoint_load(dir, 1, (const char *[]){"w"}, (dt_tensor *[]){wrong}),
               DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(),
                   "dt_checkpoint_load: tensor `w`: the checkpoint holds float32 [3, 4], the "
                   "target is float32 [2, 4]") != NULL,
            "%s", dt_last_error());
  double got[8];
  cr_assert_eq(dt_tensor_to_doubles(wrong, got, 8), DT_OK);
  for (int i = 0; i < 8; i++) cr_assert_float_eq(got[i], 0.0, 0, "element %d changed", i);
  /* A dtype mismatch names both too. */
  dt_tensor *wd = NULL;
  cr_assert_eq(dt_zeros(2, (int64_t[]){3, 4}, DT_F64, &wd), DT_OK);
  cr_assert_eq(dt_checkpoint_load(dir, 1, (const char *[]){"w"}, (dt_tensor *[]){wd}),
               DT_ERR_INVALID);
  cr_assert(strstr(dt_last_error(), "holds float32 [3, 4], the target is float64 [3, 4]") != NULL,
            "%s", dt_last_error());
  /* The right target loads the values. */
  dt_tensor *ok = NULL;
  cr_assert_eq(dt_zeros(2, (int64_t[]){3, 4}, DT_F32, &ok), DT_OK);
  cr_assert_eq(dt_checkpoint_load(dir, 1, (const char *[]){"w"}, (dt_tensor *[]){ok}), DT_OK, "%s",
               dt_last_error());
  double all[12];
  cr_assert_eq(dt_tensor_to_doubles(ok, all, 12), DT_OK);
  cr_assert_float_eq(all[11], 12.0, 0);
  dt_tensor_release(ok);
  dt_tensor_release(wd);
  dt_tensor_release(wrong);
  cr_assert_eq(fs_remove_tree(dir), 0, "removing %s: %s", dir, strerror(errno));
}

/* dt_state_dict_save to a directory failed with a message that began with the inner
 * dt_safetensors_save; it now names the public function first, then the writer's reason. */
Test(checkpoint_load_errors, state_dict_save_error_names_the_function) {
  dt_module *m = NULL;
  cr_assert_eq(dt_nn_linear(3, 2, true, 0, &m), DT_OK, "%s", dt_last_error());
  cr_assert_eq(dt_state_dict_save(m, "/tmp"), DT_ERR_IO);
  cr_assert(strncmp(dt_last_error(), "dt_state_dict_save: ", 20) == 0, "%s", dt_last_error());
  cr_assert(strstr(dt_last_error(), "cannot write /tmp: Is a directory") != NULL, "%s",
            dt_last_error());
  dt_module_destroy(m);
}
