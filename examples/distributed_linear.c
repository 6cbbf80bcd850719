/* The README's distributed example: a colwise-sharded linear on 4 in-process ranks. */
#include <dtensor/dtensor.h>
#include <stdio.h>
static dt_status rank_main(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_tensor *x = NULL, *w = NULL, *y = NULL, *full = NULL;
  dt_status st = dt_mesh_create(world, 1, (int[]){4}, (const char *[]){"tp"}, &mesh);
  if (!st)
    st = dt_dist_rand(mesh, 2, (int64_t[]){8, 3}, DT_F32, 42, 1, (dt_placement[]){dt_replicate()},
                      &x);
  if (!st)
    st = dt_dist_ones(mesh, 2, (int64_t[]){4, 3}, DT_F32, 1, (dt_placement[]){dt_shard(0)},
                      &w);                     /* colwise */
  if (!st) st = dt_linear(x, w, NULL, &y);     /* y: Shard(1), no communication */
  if (!st) st = dt_dist_full_tensor(y, &full); /* all_gather -> [8, 4] everywhere */
  if (!st && dt_comm_rank(world) == 0) {
    char b[512];
    dt_tensor_format(full, b, sizeof b);
    puts(b);
    char p[16];
    printf("y placement %s\n", dt_placement_format(dt_dist_placements(y)[0], p, 16));
  }
  dt_tensor_release(x);
  dt_tensor_release(w);
  dt_tensor_release(y);
  dt_tensor_release(full);
  dt_mesh_destroy(mesh);
  return st;
}
int main(void) {
  dt_status st = dt_comm_spawn(4, rank_main, NULL);
  if (st) printf("%s\n", dt_last_error());
  return st != 0;
}
