/* dtensor bench: the table of benchmark suites (tools/command.c dispatches to them). */
#include "tools.h"

const tool_command tool_bench_suites[] = {
    {.name = "kernels",
     .summary = "local GEMM, add and op dispatch against raw CBLAS and plain loops",
     .usage = "[--json] [--gemm-size N]",
     .run = bench_suite_kernels},
    {.name = "dispatch",
     .summary = "time to dispatch one distributed op (cache miss, hit, local op)",
     .usage = "[--world N] [--device cpu|cuda] [--json]",
     .details = "Ranks are threads (default world 4). --device cuda: seed 000 on CUDA meshes.",
     .run = bench_suite_dispatch},
    {.name = "instructions",
     .summary = "instructions of one distributed op dispatch, counted under callgrind",
     .usage = "[--json] [--results FILE.csv] [--device cpu|cuda] [--time]",
     .details = "Needs valgrind. --results appends CSV rows name,instruction_count,value.\n"
                "--device cuda: seed 001 on CUDA tensors. --time: ns per call, no valgrind.",
     .run = bench_suite_instructions},
    {.name = "collectives",
     .summary = "time and bandwidth of each collective over doubling sizes (nccl-tests style)",
     .usage = "[--backend threads|fake|mpi] [--world W] [--json] [--min-bytes N] "
              "[--max-bytes N]\n       [--ops all_reduce,all_gather,reduce_scatter,broadcast,"
              "all_to_all]",
     .details = "Sizes take K, M and G suffixes. With --backend mpi the world is mpirun's.",
     .run = bench_suite_collectives},
    {.name = "profile",
     .summary = "cost of recording profiler events and of analysing a trace",
     .usage = "[--json] [--keep] [--events N]",
     .details = "--events: the generated trace's events (default 1000000); --keep keeps it.",
     .run = bench_suite_profile},
    {.name = "tp",
     .summary = "a tensor-parallel MLP on 2 ranks against the same graph on 1 rank",
     .usage = "[--json] [--iters N] [--hidden H] [--batch B] [--device cpu]",
     .details = "--device cuda is refused: the bench runs exported programs, whose parameters "
                "live in host memory.",
     .run = bench_suite_tp},
    {.name = "autograd",
     .summary = "recording overhead per op and for a 1024^2 matmul; TP MLP backward, 2 vs 1 rank",
     .usage = "[--json] [--iters N] [--hidden H] [--batch B]",
     .run = bench_suite_autograd},
    {.name = "ckpt",
     .summary = "state-dict save and load bandwidth on 1 and 4 ranks vs raw write/read",
     .usage = "[--json] [--size BYTES] [--1g] [--dir DIR] [--reps N] [--no-checksum] [--many N]",
     .details =
         "--size takes K, M and G suffixes (default 256M; --1g: 1 GiB). DIR (default\n"
         "/tmp) holds the files, removed afterwards; best of N alternating runs (default 3).\n"
         "--no-checksum: loads skip the data files' CRC32C (skip_data_checksum).\n"
         "--many N: save and load N small tensors on 1 and 4 ranks, and load each of a\n"
         "100,000-tensor safetensors file by name (per-tensor costs).",
     .run = bench_suite_ckpt},
    {.name = "compile",
     .summary = "compiled call vs eager per node, guard check, compile time, the seed embedding, "
                "a training step",
     .usage = "[--json] [--iters N] [--batch B] [--device cpu|cuda] [--train | --instructions "
              "[--steps N] | --child --side eager|compiled --batch B [--steps N]]",
     .details = "--device cuda: seed 004 (the embedding over a Replicate 202048x256 weight) on a "
                "CUDA mesh only. --train: the training step alone, wall and CPU time, sides "
                "alternating, medians. --instructions: its instructions per step under callgrind, "
                "each side at each batch in its own child. --child: one side at one batch, the "
                "counted steps between callgrind client requests (to run under valgrind by hand).",
     .run = bench_suite_compile},
    {.name = "train",
     .summary = "optimizer step (SGD momentum, AdamW) over 1,000 x 1,000 floats vs a plain C loop",
     .usage = "[--json] [--iters N] [--params P] [--elems E] [--only optim|demo|fsdp]\n"
              "       [--device cpu|cuda] (cuda: with --only demo)\n"
              "       --size gpt2-like|small [--vocab V] [--dmodel D] [--heads H] [--layers L]\n"
              "       [--seq T] [--batch B] [--steps N] [--threads N] [--forward]\n"
              "       [--attention explicit|sdpa] [--clock cpu|wall] [--tp 2 | --fsdp 2] [--json]",
     .details =
         "With --size: the training step of a GPT-2-like decoder (bench/bench_gpt.h; gpt2-like:\n"
         "vocab 8192, d_model 512, 8 heads, 4 layers, seq 256, batch 8; small for quick runs;\n"
         "the other size options override the named size), 1 rank: ms/step, tokens/s and\n"
         "achieved GFLOP/s against cblas_sgemm's rate at the step's shapes, measured in the run.\n"
         "--threads sets the BLAS's and the kernels' threads; --forward times the forward and\n"
         "the loss only, under no_grad; --clock: process CPU time (default) or wall time (use\n"
         "it with --threads above 1: CPU time adds the threads up). Also prints the page\n"
         "faults per step (fresh pages the allocator had to map). --tp N / --fsdp N: the same\n"
         "model, data and initial weights on N rank threads (threads backend, 1 thread each):\n"
         "Megatron tensor parallelism (per-head q/k/v, vocabulary-parallel head and loss) or\n"
         "FSDP (dt_parallel_fsdp, the batch split); per rank the rank thread's CPU time and the\n"
         "wall time per step, the bytes its collectives move, and every step's loss.\n"
         "--attention sdpa (1 rank): each block's causal attention through the fused\n"
         "scaled_dot_product_attention instead of matmul + masked_fill + softmax (explicit,\n"
         "the default); same weights and data, so the losses agree to float32 rounding.",
     .run = bench_suite_train},
    {.name = "ops",
     .summary = "each non-GEMM op of the GPT-2-like step, fwd and fwd+bwd, vs a memcpy; its GEMMs "
                "vs cblas",
     .usage = "[--json] [--iters N] [--only OP|adamw|gemm] [--size gpt2-like|small]\n"
              "       [--vocab V] [--dmodel D] [--heads H] [--layers L] [--seq T] [--batch B]\n"
              "       [--threads N] [--clock cpu|wall] [--gemm-dtype f32|bf16]",
     .details =
         "Ops: layer_norm gelu softmax log_softmax cross_entropy mul_btd_bt1 add_btd_d\n"
         "mul_btd_d masked_fill embedding rotary add_btd_btd add_btd_td mul_scalar merge_heads\n"
         "rms_norm, then adamw and the GEMM calls (gemm). Each op runs alternating with a\n"
         "memcpy of the bytes it must move, each GEMM call with cblas_sgemm on the same\n"
         "operands; xR is ours / that time (below 1: ours is faster).\n"
         "--clock: process CPU time (default) or wall time; --threads sets the BLAS's and the\n"
         "kernels' threads. --gemm-dtype bf16: the GEMM calls multiply bfloat16 tensors\n"
         "(conversions included) against cblas_sgemm on the same values as float32. The\n"
         "library's float32 GEMMs run on AMX tiles where the CPU has them (a header line says\n"
         "so; DT_AMX=0: on the BLAS). float32 GEMM lines end with \"err ours / cblas\": the\n"
         "largest error over 16 rows against a float64 loop, relative to the sum of |a b| of\n"
         "the element.",
     .run = bench_suite_ops},
    {.name = "models",
     .summary = "Hugging Face models: prefill, decode and fine-tuning tokens/s, 1 rank and TP 2; "
                "attention memory",
     .usage = "[--json] [--model DIR | --size small|tiny|gpt2-small] [--only generate|train] "
              "[--prompt N] [--new N] [--batch N] [--seq N] [--reps N] [--keep] [--write-only] "
              "| --attention-memory [--seq N] [--heads N] [--head-dim N] [--batch N] [--reps N] "
              "[--threads N]",
     .details =
         "Without --model a random model of --size is written to a temporary directory\n"
         "(--keep keeps it, --write-only only writes it): small (default; Llama: vocab 2048,\n"
         "hidden 256, 4 layers, 8 heads over 4 kv heads, intermediate 688), tiny, or\n"
         "gpt2-small (GPT-2: vocab 50257, 768 wide, 12 layers, 12 heads). 1 rank and TP 2\n"
         "(threads) alternate; one BLAS thread per rank. Training: --batch x --seq token ids,\n"
         "loss, backward, AdamW per step; both sides' losses are printed.\n"
         "--attention-memory: peak bytes of causal attention forward+backward, and the CPU\n"
         "time of the forward and of forward+backward, fused against matmul+softmax (default\n"
         "B 1, 12 heads of 64, seq 2048, 1 thread); bench/peers/attention.py is its PyTorch\n"
         "twin. bench/peers/models.py runs the same model with transformers.",
     .run = bench_suite_models},
    {.name = "pipeline",
     .summary = "1F1B bubble from a trace vs (p-1)/(m+p-1); activation checkpointing cost",
     .usage = "[--json]",
     .run = bench_suite_pipeline},
    {.name = "context",
     .summary =
         "ring attention on 2 cp ranks vs attention of the whole sequence: time, peak memory",
     .usage = "[--json] [--seq T] [--reps N]",
     .details = "Causal, B 1, H 4, E 64, float32; T defaults to 2048, N (<= 15) to 3.",
     .run = bench_suite_context},
    {.name = "cuda",
     .summary = "CUDA kernels vs cuBLAS and device copies: GEMM, add, softmax/layer_norm, copies",
     .usage = "[--json] [--reps N]",
     .details =
         "GEMM TFLOP/s (f32, tf32, bf16) against a direct cublasGemmEx; add, softmax and\n"
         "layer_norm GB/s against cudaMemcpy device to device; host<->device copies of 256 MiB\n"
         "against cudaMemcpy; alternating sides, median of N (default 7). Without a CUDA\n"
         "device (or built without CUDA) one line says so and it exits 0.",
     .run = bench_suite_cuda},
    {0},
};
