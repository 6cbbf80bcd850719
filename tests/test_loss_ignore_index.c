/* cross_entropy's ignore_index: the pointer's edge cases locally, and vocabulary-parallel and
 * row-sharded cross_entropy on 3 ranks (a rank with no row, uneven classes) with an ignored
 * row, against the local value. */
#include <criterion/criterion.h>
#include <limits.h>

#include "comm_helpers.h"
#include "reference.h"
#include "value_helpers.h"

/* ---- cross_entropy's ignore_index pointer ------------------------------------------------- */

Test(loss_ignore_index, cross_entropy_ignore_index_edges) {
  int64_t shape[2] = {3, 4}, rows = 3;
  dt_tensor *logits = iota_t(2, shape, DT_F32), *target = NULL, *loss = NULL, *plain = NULL;
  double t[3] = {1, 3, 1};
  target = ref_tensor(1, &rows, DT_I64, t);
  /* An ignore_index no target equals (even out of the class range) changes nothing. */
  int64_t far = INT64_MIN;
  dt_cross_entropy_options o = {.ignore_index = &far};
  OK(dt_cross_entropy_ex(logits, target, &o, &loss));
  OK(dt_cross_entropy(logits, target, &plain));
  cr_assert_eq(((float *)dt_tensor_data(loss))[0], ((float *)dt_tensor_data(plain))[0]);
  dt_tensor_release(loss);
  loss = NULL;
  /* Every row ignored: the mean is 0 / 0 (PyTorch gives nan), the sum 0, none all zeros. */
  int64_t one = 1;
  o.ignore_index = &one;
  double all1[3] = {1, 1, 1};
  dt_tensor *ones = ref_tensor(1, &rows, DT_I64, all1);
  OK(dt_cross_entropy_ex(logits, ones, &o, &loss));
  cr_assert(isnan(((float *)dt_tensor_data(loss))[0]), "mean over no row: %g",
            ((float *)dt_tensor_data(loss))[0]);
  dt_tensor_release(loss);
  loss = NULL;
  o.reduction = DT_LOSS_SUM;
  OK(dt_cross_entropy_ex(logits, ones, &o, &loss));
  cr_assert_eq(((float *)dt_tensor_data(loss))[0], 0.0f);
  dt_tensor_release(loss);
  loss = NULL;
  /* A target out of range that is not the ignored index is still an error (DT_ERR_INVALID, as
   * documented; embedding and scatter_add say DT_ERR_INDEX). */
  double bad[3] = {1, 4, 1};
  dt_tensor *bt = ref_tensor(1, &rows, DT_I64, bad);
  o.reduction = DT_LOSS_MEAN;
  cr_assert_eq(dt_cross_entropy_ex(logits, bt, &o, &loss), DT_ERR_INVALID, "%s", dt_last_error());
  cr_assert(strstr(dt_last_error(), "cross_entropy"), "%s", dt_last_error());
  /* The ignored index may itself lie outside [0, classes): -100 rows are skipped. */
  double with_ignored[3] = {1, -100, 1};
  dt_tensor *wt = ref_tensor(1, &rows, DT_I64, with_ignored);
  int64_t minus100 = -100;
  o.ignore_index = &minus100;
  OK(dt_cross_entropy_ex(logits, wt, &o, &loss));
  /* rows 0 and 2 are the same logits and target: the mean is row 0's loss */
  double *lv = ref_values(logits);
  double mx = lv[0], z = 0;
  for (int j = 0; j < 4; j++) mx = fmax(mx, lv[j]);
  for (int j = 0; j < 4; j++) z += exp(lv[j] - mx);
  double row0 = -(lv[1] - mx - log(z));
  free(lv);
  cr_assert(fabs(((float *)dt_tensor_data(loss))[0] - row0) < 1e-5, "%g vs %g",
            ((float *)dt_tensor_data(loss))[0], row0);
  dt_tensor_release(loss);
  dt_tensor_release(wt);
  dt_tensor_release(bt);
  dt_tensor_release(ones);
  dt_tensor_release(plain);
  dt_tensor_release(target);
  dt_tensor_release(logits);
}

/* Vocabulary-parallel and row-sharded cross_entropy on 3 ranks, 2 rows and 4 classes (a rank
 * with no row, uneven classes), with an ignored row: the local value. */
static dt_status ce_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){3}, NULL, &mesh));
  int64_t shape[2] = {2, 4}, rows = 2, ign = 2;
  dt_tensor *logits = iota_t(2, shape, DT_F32);
  double tv[2] = {2, 3};
  dt_tensor *target = ref_tensor(1, &rows, DT_I64, tv);
  dt_cross_entropy_options o = {.ignore_index = &ign};
  dt_tensor *want = NULL;
  RANK_OK(dt_cross_entropy_ex(logits, target, &o, &want));
  dt_placement lp[2][2] = {{dt_shard(1), dt_replicate()}, {dt_shard(0), dt_shard(0)}};
  for (int k = 0; k < 2; k++) {
    dt_tensor *dl = NULL, *dtg = NULL, *got = NULL;
    RANK_OK(dt_dist_distribute_tensor(mesh, logits, 1, &lp[k][0], &dl));
    RANK_OK(dt_dist_distribute_tensor(mesh, target, 1, &lp[k][1], &dtg));
    RANK_OK(dt_cross_entropy_ex(dl, dtg, &o, &got));
    RANK_OK(
        full_equals(k ? "row-sharded cross_entropy" : "vocab-parallel cross_entropy", got, want));
    dt_tensor_release(got);
    dt_tensor_release(dtg);
    dt_tensor_release(dl);
  }
  dt_tensor_release(want);
  dt_tensor_release(target);
  dt_tensor_release(logits);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(loss_ignore_index, cross_entropy_ignore_index_three_ranks) { SPAWN_OK(3, ce_rank, NULL); }
