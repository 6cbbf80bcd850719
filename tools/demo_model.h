/* The demo's model: a small decoder-only transformer on a 2-D ("dp", "tp") mesh, trained
 * with AdamW to reverse token sequences (see tools/demo_train.c). Shared by `dtensor demo`
 * (tools/demo_train.c) and `dtensor bench train` (bench/bench_train.c), so that the bench
 * times the very step the demo runs. */
#ifndef TOOLS_DEMO_MODEL_H
#define TOOLS_DEMO_MODEL_H

#include "dtensor/dtensor.h"

#define VOCAB 32
#define DMODEL 32
#define HEADS 2
#define HEAD_DIM (DMODEL / HEADS)
#define FFN 64
#define LAYERS 2
#define PROMPT 6
#define SEQ (2 * PROMPT) /* the model's input length; a sample has SEQ + 1 tokens */
#define BATCH 16
#define SEP 0 /* token 0 separates the prompt from its reversal */
#define IGNORE (-100)

typedef struct demo_model demo_model;

/* The parameters (same initial weights on any mesh), the causal mask and the optimizer on
 * mesh, a 2-D mesh ("dp", "tp") the caller keeps until demo_model_destroy. Collective: every
 * rank of the mesh calls it. */
dt_status demo_model_create(dt_mesh *mesh, demo_model **out);

/* One training step on batch number `step` (the same data on any mesh): zero_grad, forward,
 * loss, backward, optimizer step, inside a profiler range "train_step". *loss is the step's
 * loss (may be NULL). Collective. */
dt_status demo_model_step(demo_model *m, int step, double *loss);

/* The same model as two pipeline stages (embeddings and the first half of the blocks; the
 * rest, the final norm and the LM head) on the 2 pp ranks of pm, each stage with the Megatron
 * and data-parallel placements on pm's ("dp", "tp") stage mesh, run with 1F1B over
 * `microbatches` microbatches (dtensor/pipeline.h). demo_model_step then runs the pipeline;
 * its loss is the same on every rank. pm must outlive the model. Collective over pm's world. */
dt_status demo_model_create_pipelined(dt_pp_mesh *pm, int microbatches, demo_model **out);

void demo_model_destroy(demo_model *m);

#endif /* TOOLS_DEMO_MODEL_H */
