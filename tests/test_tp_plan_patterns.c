/* Patterns in tensor-parallel plans: "layers.*.self_attn.q_proj" reaches the q_proj of every
 * layer (and nothing outside one dotted segment), a pattern matching nothing is refused by
 * name, and a module matched by two entries is refused as named twice. */
#include <criterion/criterion.h>

#include "comm_helpers.h"
#include "dtensor/dtensor.h"

#define D 8
#define LAYERS 3

/* A module "layers" holding LAYERS Llama blocks, and a Linear "head" beside it. */
static dt_status make_tree(dt_module **out) {
  dt_module *root = NULL, *list = NULL, *blk = NULL, *head = NULL;
  dt_status st = dt_module_create("Root", NULL, NULL, &root);
  if (!st) st = dt_module_create("ModuleList", NULL, NULL, &list);
  if (!st) st = dt_module_add_child(root, "layers", list);
  for (int l = 0; l < LAYERS && !st; l++) {
    dt_nn_block_options o = {.norm_eps = 1e-5, .hidden = 16, .attention = {.n_heads = 2}};
    char name[8];
    snprintf(name, sizeof name, "%d", l);
    st = dt_nn_transformer_block(D, &o, &blk);
    if (!st) st = dt_module_add_child(list, name, blk);
  }
  if (!st) st = dt_nn_linear(D, D, false, 5, &head);
  if (!st) st = dt_module_add_child(root, "head", head);
  if (st) dt_module_destroy(root);
  *out = st ? NULL : root;
  return st;
}

static bool sharded_on(dt_module *root, const char *fqn, int dim) {
  dt_tensor *t = dt_module_get_tensor(root, fqn);
  if (!t || !dt_tensor_is_distributed(t)) return false;
  dt_placement p = dt_dist_placements(t)[0];
  return p.kind == DT_SHARD && p.dim == dim;
}

static dt_status patterns_rank(dt_comm *world, void *arg) {
  (void)arg;
  dt_mesh *mesh = NULL;
  dt_module *root = NULL;
  RANK_OK(dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"tp"}, &mesh));
  RANK_OK(make_tree(&root));
  static const dt_tp_plan_entry plan[] = {
      {"layers.*.self_attn.q_proj", DT_TP_COLWISE},
      {"layers.*.mlp.*_proj", DT_TP_COLWISE}, /* gate_proj, up_proj and down_proj */
      {"head", DT_TP_ROWWISE},
  };
  RANK_OK(dt_parallel_tp_module(root, mesh, &(dt_tp_plan){3, plan}, NULL));
  char fqn[96];
  for (int l = 0; l < LAYERS; l++) {
    snprintf(fqn, sizeof fqn, "layers.%d.self_attn.q_proj.weight", l);
    RANK_CHECK(sharded_on(root, fqn, 0), "%s is not Shard(0)", fqn);
    snprintf(fqn, sizeof fqn, "layers.%d.self_attn.k_proj.weight", l);
    RANK_CHECK(!dt_tensor_is_distributed(dt_module_get_tensor(root, fqn)), "%s was sharded", fqn);
    snprintf(fqn, sizeof fqn, "layers.%d.mlp.down_proj.weight", l);
    RANK_CHECK(sharded_on(root, fqn, 0), "%s is not Shard(0)", fqn);
  }
  RANK_CHECK(sharded_on(root, "head.weight", 1), "head.weight is not Shard(1)");
  dt_module_destroy(root);

  /* '*' stays within one segment: "*.q_proj" would need the FQN to have two segments. */
  RANK_OK(make_tree(&root));
  static const dt_tp_plan_entry shallow[] = {{"*.q_proj", DT_TP_COLWISE}};
  dt_status st = dt_parallel_tp_module(root, mesh, &(dt_tp_plan){1, shallow}, NULL);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "'*.q_proj' matches no module"),
             "a pattern matching nothing: %s (%s)", dt_status_string(st), dt_last_error());
  RANK_CHECK(
      !dt_tensor_is_distributed(dt_module_get_tensor(root, "layers.0.self_attn.q_proj.weight")),
      "a refused plan changed the model");
  static const dt_tp_plan_entry twice[] = {{"layers.*.mlp.up_proj", DT_TP_COLWISE},
                                           {"layers.1.mlp.up_*", DT_TP_ROWWISE}};
  st = dt_parallel_tp_module(root, mesh, &(dt_tp_plan){2, twice}, NULL);
  RANK_CHECK(st == DT_ERR_INVALID && strstr(dt_last_error(), "'layers.1.mlp.up_proj' twice"),
             "a module two patterns match: %s (%s)", dt_status_string(st), dt_last_error());
  dt_module_destroy(root);
  dt_mesh_destroy(mesh);
  return DT_OK;
}

Test(tp_plan_patterns, wildcards_reach_every_layer) { SPAWN_OK(2, patterns_rank, NULL); }
