/* dtensor — the command-line tool: demo, info, plan, generate, finetune, bench, ckpt, trace. */
#include <stdlib.h>
#include <unistd.h>

#include "kernels/cpu/blas.h"
#include "tools.h"

static const tool_command commands[] = {
    {.name = "demo",
     .summary = "the main job: train a transformer on a 2 (dp) x 2 (tp) mesh of 4 ranks",
     .usage = "[--steps N] [--log-every N] [--mesh dp=A,[pp=P,]tp=B] [--backend threads|mpi] "
              "[--device cpu|cuda]\n       | tp [--world N] [--backend threads|mpi] [--json]",
     .details = "Trains a small decoder-only transformer (AdamW, vocabulary-parallel loss) to "
                "reverse\nsequences on 4 ranks, checks every step's loss against 1 rank, writes "
                "\ndtensor_demo_trace.json and dtensor_demo_loss.svg. --steps N (default 300).\n"
                "--mesh dp=2,pp=2,tp=2: 8 ranks, two pipeline stages (1F1B, 4 microbatches) "
                "with dp x tp\ninside each (dp 1, 2 or 4; pp 1 or 2; tp 1 or 2; default "
                "dp=2,tp=2).\n"
                "--device cuda: the meshes on the GPU (rank r on cuda:(r mod count); no pp); "
                "refused\nwithout a CUDA device.\n"
                "'tp': the TP-transform walkthrough: a TP MLP exported, transformed and run on N "
                "ranks\n(default 4); --json: stdout is one JSON object (the summary), the "
                "walkthrough goes\nto stderr. --backend mpi (or DT_BACKEND=mpi): mpirun's ranks.",
     .run = tool_demo},
    {.name = "info",
     .summary = "version, the op table and its sharding rules",
     .usage = "[--ops] [--json]",
     .run = tool_info},
    {.name = "plan",
     .summary = "what an op does on given placements: output placements, collectives, bytes",
     .usage = "[--json] MESH OP ARG... [ATTR=VALUE...] | --stdin",
     .details = tool_plan_details,
     .run = tool_plan},
    {.name = "generate",
     .summary = "token ids from a Hugging Face Llama or GPT-2 directory, with tokens/s",
     .usage = "--model DIR --prompt-ids 1,2,3 [--max-new N] [--tp N] [--fsdp N] "
              "[--temperature T] [--top-k K] [--top-p P] [--seed S] [--ignore-eos]",
     .details = "Greedy by default (KV cache); --temperature > 0 samples (then top-k, top-p), "
                "the same\ntoken on every rank. Stops after any of config.json's eos_token_id "
                "ids, as transformers\ndoes (--ignore-eos: only at --max-new). Ranks are "
                "threads: --tp x --fsdp of them (docs/models.md).",
     .run = tool_generate},
    {.name = "finetune",
     .summary = "fine-tune a Hugging Face Llama or GPT-2 on token ids, save in its layout",
     .usage = "--model DIR --data TOKENS.safetensors [--key NAME] [--steps N] [--lr LR] "
              "[--tp N] [--fsdp N] [--out DIR]",
     .details = "Each step: the causal-LM loss of the whole int64 [N, T] tensor NAME "
                "(default input_ids),\nbackward, clip_grad_norm 1.0, AdamW (betas 0.9, 0.95, "
                "weight decay 0.1; --lr default 1e-3).\nPrints every loss; saves --out "
                "(default finetuned) as config.json + model.safetensors.",
     .run = tool_finetune},
    {.name = "bench",
     .summary = "benchmarks against baselines measured in the same run",
     .subcommands = tool_bench_suites,
     .noun = "suite"},
    {.name = "ckpt",
     .summary = "safetensors files and distributed checkpoints: inspect",
     .subcommands = tool_ckpt_commands,
     .noun = "command"},
    {.name = "trace",
     .summary = "utilization of a Chrome trace, or its timeline as SVG",
     .subcommands = tool_trace_commands,
     .noun = "command"},
    {0},
};

int main(int argc, char **argv) {
  /* OpenBLAS chose its kernels when it loaded; when it fell back to SSE3 on a CPU with AVX2
   * or AVX-512, run again with the core type named (once: the variable is then set). */
  /* DT_OPENBLAS_CORETYPE_CHOSEN marks a process (or its children) that chose already. */
  const char *core = getenv("DT_OPENBLAS_CORETYPE_CHOSEN") ? NULL : dt__blas_better_coretype();
  if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0 &&
      setenv("DT_OPENBLAS_CORETYPE_CHOSEN", core, 1) == 0)
    execv("/proc/self/exe", argv);
  /* The library reports what it ignores (DT_NUM_THREADS=abc) through the log callback only. */
  tool_log_to_stderr();
  return tool_dispatch("dtensor", commands, "command", argc, argv);
}
