/* Shared parts of `dtensor bench models` (bench_models*.c). */
#ifndef DT_BENCH_MODELS_H
#define DT_BENCH_MODELS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtensor/dtensor.h"

/* A random model the suite writes: a LlamaForCausalLM, or a GPT2LMHeadModel (gpt2: H heads of
 * hd = D / H, KV unused, I the MLP width, P positions). */
typedef struct bench_model_size {
  const char *name;
  bool gpt2;
  int64_t V, D, I, L, H, KV, hd, P;
} bench_model_size;

/* Writes config.json and model.safetensors of a random model of size z into dir (weights
 * normal * 0.05, norm weights 1 + 0.1 normal, fixed seeds; GPT-2 with every dropout 0). */
dt_status bench_models_write(const bench_model_size *z, const char *dir);

/* `dtensor bench models --attention-memory`: peak bytes of fused attention forward+backward
 * against the matmul+softmax composition (bench_models_attention.c). Must run before the
 * process creates any library object (it installs a counting allocator). */
int bench_models_attention(int argc, char **argv);

#endif
