/* The GPT-2-like decoder of issue 26, shared by `dtensor bench train --size ...` (the whole
 * training step, bench/bench_gpt.c) and `dtensor bench ops` (its non-GEMM ops and GEMM calls
 * one by one, bench/bench_ops.c): token and position embeddings, pre-norm blocks of causal
 * attention (matmul + masked_fill + softmax, or the fused scaled_dot_product_attention:
 * gpt_model_set_sdpa) and a GELU MLP (4 x d_model), a final LayerNorm,
 * an untied LM head, cross_entropy and AdamW; float32, one rank. */
#ifndef BENCH_GPT_H
#define BENCH_GPT_H

#include <stdbool.h>
#include <stdint.h>

#include "dtensor/dtensor.h"

typedef struct gpt_sizes {
  int64_t vocab, dmodel, heads, layers, seq, batch;
} gpt_sizes;

/* gpt2-like: vocab 8192, d_model 512, 8 heads, 4 layers, seq 256, batch 8 (21.1M
 * parameters, 219 GFLOP per training step). small: vocab 1024, d_model 128, 4 heads,
 * 2 layers, seq 64, batch 4, for quick runs. */
bool gpt_sizes_named(const char *name, gpt_sizes *out);

/* The sizes named by the command line's --size (gpt2-like when none or an unknown name, which
 * gpt_sizes_option then refuses): the base the other size options change, in any order. */
void gpt_sizes_start(int argc, char **argv, gpt_sizes *s);

/* Reads one size option at argv[*i] (--size NAME, --vocab, --dmodel, --heads, --layers,
 * --seq, --batch; the value is argv[*i + 1], consumed). Returns 1 when it took the option,
 * 0 when argv[*i] is no size option, -1 on a bad value. */
int gpt_sizes_option(int argc, char **argv, int *i, gpt_sizes *s);

/* The most elements of any one count of a model (parameters, logits, attention scores): 2^34,
 * 64 GiB of float32, beyond any machine this runs on and far from int64's overflow. */
#define GPT_MAX_ELEMENTS (1LL << 34)

/* True when the sizes make a model: every size >= 1, heads dividing d_model, and the counts
 * within GPT_MAX_ELEMENTS. */
bool gpt_sizes_valid(const gpt_sizes *s);

/* Parameters of the model, and the FLOPs of the matrix products of one training step
 * (forward, then twice that for the backward: 2 M N K per product). */
int64_t gpt_param_count(const gpt_sizes *s);
double gpt_step_flops(const gpt_sizes *s);

typedef struct gpt_model gpt_model;

/* Random weights (GPT-2's initialisation: N(0, 0.02), the residual projections scaled by
 * 1/sqrt(2 layers)), an AdamW optimizer and random token data, all from `seed`. */
dt_status gpt_model_create(const gpt_sizes *s, uint64_t seed, gpt_model **out);
void gpt_model_destroy(gpt_model *m);

/* One training step: zero_grad, forward, loss, backward, AdamW. *loss gets the step's loss
 * (may be NULL). */
dt_status gpt_model_step(gpt_model *m, double *loss);

/* The forward and the loss only, under no_grad (nothing recorded for backward). */
dt_status gpt_model_forward(gpt_model *m, double *loss);

/* on: the attention of every block through dt_scaled_dot_product_attention (is_causal, the
 * fused flash-style op) instead of matmul + scale + masked_fill + softmax + matmul; the same
 * function, so the losses agree to float32 rounding. Off at creation. */
void gpt_model_set_sdpa(gpt_model *m, bool on);

/* The model's parameters (borrowed), for `bench ops`' AdamW case and the 2-rank models of
 * bench/bench_gpt_dist.c (which start from these weights): GPT_GLOBAL_PARAMS, then
 * GPT_BLOCK_PARAMS per layer, in the orders of the enums below. */
int gpt_model_params(const gpt_model *m, dt_tensor *const **params);

enum {
  GPT_LN1_W,
  GPT_LN1_B,
  GPT_QKV_W, /* [3 d_model, d_model]: q, k, v stacked on dim 0 */
  GPT_QKV_B,
  GPT_OUT_W,
  GPT_OUT_B,
  GPT_LN2_W,
  GPT_LN2_B,
  GPT_FC1_W,
  GPT_FC1_B,
  GPT_FC2_W,
  GPT_FC2_B,
  GPT_BLOCK_PARAMS
};
enum { GPT_TOK, GPT_POS, GPT_LNF_W, GPT_LNF_B, GPT_HEAD, GPT_GLOBAL_PARAMS };

/* The model's token ids [batch, seq] and targets [batch * seq] (int64, borrowed). */
void gpt_model_data(const gpt_model *m, dt_tensor **idx, dt_tensor **target);

/* Prints n losses as a JSON array and closes the JSON line ("[l0,l1,...]}\n"): 9 digits, so
 * that runs can be compared to 1e-7. */
void gpt_print_losses(const double *losses, int n);

/* `dtensor bench train --size ... --tp 2 | --fsdp 2` (bench/bench_gpt_dist.c): the same model,
 * data and initial weights on 2 rank threads. mode: "tp" or "fsdp". Returns the exit code. */
int bench_gpt_train_dist(const gpt_sizes *s, const char *mode, int ranks, int steps, bool json);

#endif /* BENCH_GPT_H */
