/* Loads the tiny Hugging Face Llama fixture onto 2 tensor-parallel ranks (threads backend),
 * generates 12 tokens greedily after its 5-token prompt and checks them against the ids
 * transformers generated (io.safetensors: prompt_ids [1, 5], greedy_ids [1, 17]).
 *   example_hf_generate_tp [MODEL_DIR]   (default: ../shared/fixtures/hf/llama_tiny)
 * Exits 77 (CTest's skip) when the fixture is absent. */
#include <dtensor/dtensor.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { MAX_NEW = 12 };

typedef struct job {
  const char *dir;
  const int64_t *prompt, *expected;
  int64_t n_prompt, n_expected;
} job;

static dt_status rank_main(dt_comm *world, void *arg) {
  const job *j = arg;
  dt_mesh *mesh = NULL;
  dt_hf_model *model = NULL;
  dt_hf_plan plan = {.tp = "tp"}; /* Megatron TP over the mesh dim named "tp" */
  int64_t out[64], n = 0;
  dt_status st = dt_mesh_create(world, 1, (int[]){2}, (const char *[]){"tp"}, &mesh);
  if (!st) st = dt_hf_model_load(j->dir, mesh, &plan, &model); /* each rank reads its shards */
  if (!st) st = dt_hf_generate(model, j->prompt, j->n_prompt, MAX_NEW, NULL, out, &n, NULL, NULL);
  if (!st && dt_comm_rank(world) == 0) {
    printf("ids:");
    for (int64_t i = 0; i < n; i++) printf(" %lld", (long long)out[i]);
    bool same = n == j->n_expected && !memcmp(out, j->expected, (size_t)n * sizeof *out);
    printf("\n%s transformers' greedy ids\n", same ? "equal to" : "DIFFERENT from");
    if (!same) st = DT_ERR_INTERNAL;
  }
  dt_hf_model_destroy(model);
  dt_mesh_destroy(mesh);
  return st;
}

int main(int argc, char **argv) {
  job j = {.dir = argc > 1 ? argv[1] : "../shared/fixtures/hf/llama_tiny"};
  char path[1024];
  snprintf(path, sizeof path, "%s/io.safetensors", j.dir);
  if (access(path, R_OK) != 0) { /* the fixtures are not on this machine: nothing to check */
    printf("skipped: %s is absent (the Hugging Face fixtures)\n", path);
    return 77;
  }
  dt_safetensors *io = NULL;
  dt_tensor *prompt = NULL, *expected = NULL;
  dt_status st = dt_safetensors_open(path, &io);
  if (!st) st = dt_safetensors_load(io, "prompt_ids", DT_SAFETENSORS_COPY, &prompt); /* int64 */
  if (!st) st = dt_safetensors_load(io, "greedy_ids", DT_SAFETENSORS_COPY, &expected);
  if (!st && dt_tensor_numel(expected) > 64) st = DT_ERR_INVALID;
  if (!st) {
    j.prompt = dt_tensor_data(prompt);
    j.n_prompt = dt_tensor_numel(prompt);
    j.expected = dt_tensor_data(expected);
    j.n_expected = dt_tensor_numel(expected);
    st = dt_comm_spawn(2, rank_main, &j);
  }
  if (st) fprintf(stderr, "error: %s\n", dt_last_error());
  dt_tensor_release(prompt);
  dt_tensor_release(expected);
  dt_safetensors_destroy(io);
  return st != 0;
}
