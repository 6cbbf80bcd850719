"""PyTorch twin of `dtensor bench train --size gpt2-like` (bench/bench_gpt.c): the same GPT-2-like
decoder (token and position embeddings, pre-norm LayerNorm blocks with a fused qkv linear,
causal attention, GELU MLP 4x, final LayerNorm, untied LM head, cross_entropy, AdamW lr 3e-4),
one training step (or, with --forward, the forward and loss under no_grad) timed like ours in
process CPU time, or wall time with --clock wall (needed for --threads > 1, where CPU time
adds the threads up), torch.set_num_threads(--threads) and ours `--threads` alike.
Two attention variants: "explicit" (matmul, scale, masked_fill, softmax, matmul: what our step
runs by default) and "sdpa" (F.scaled_dot_product_attention, is_causal); --ours-attention sdpa
runs ours with the fused op too (`bench train --attention sdpa`). Rounds alternate: PyTorch
explicit, PyTorch sdpa, then `dtensor bench train --json` in a subprocess, ...; prints JSON
lines per side and round, then per variant the medians, spreads and the ratio PyTorch / ours
(> 1: ours is faster).

    python bench/peers/gpt_train.py --dtensor build/dtensor [--rounds 3] [--steps 2] \\
        [--threads 1] [--size gpt2-like|small|gpt2-small-width] [--forward] [--clock cpu|wall]

Not part of the build or CI; needs torch (the CPU build is enough).
"""
import json
import math
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

from peers_common import emit, parser, spread

SIZES = {
    "gpt2-like": dict(vocab=8192, dmodel=512, heads=8, layers=4, seq=256, batch=8),
    "small": dict(vocab=1024, dmodel=128, heads=4, layers=2, seq=64, batch=4),
    # GPT-2 small's width (the second size); 2 layers, batch 4 as in gpt_parallel.py.
    "gpt2-small-width": dict(vocab=8192, dmodel=768, heads=12, layers=2, seq=512, batch=4),
}


class Model(torch.nn.Module):
    def __init__(self, s, sdpa):
        super().__init__()
        d, v, t = s["dmodel"], s["vocab"], s["seq"]
        self.s, self.sdpa = s, sdpa
        self.tok = torch.nn.Parameter(torch.randn(v, d) * 0.02)
        self.pos = torch.nn.Parameter(torch.randn(t, d) * 0.02)
        self.blocks = torch.nn.ModuleList()
        for _ in range(s["layers"]):
            b = torch.nn.Module()
            b.ln1, b.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            b.qkv, b.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            b.fc1, b.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
            self.blocks.append(b)
        self.lnf = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, v, bias=False)
        self.register_buffer("mask", torch.ones(t, t, dtype=torch.bool).triu(1))

    def attention(self, b, h):
        s = self.s
        bt, t, d, nh = s["batch"], s["seq"], s["dmodel"], s["heads"]
        q, k, v = b.qkv(h).split(d, dim=2)
        q, k, v = (z.reshape(bt, t, nh, d // nh).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            sc = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(d // nh))
            a = torch.softmax(sc.masked_fill(self.mask, float("-inf")), -1) @ v
        return b.out(a.transpose(1, 2).reshape(bt, t, d))

    def forward(self, idx, target):
        x = F.embedding(idx, self.tok) + self.pos
        for b in self.blocks:
            x = x + self.attention(b, b.ln1(x))
            x = x + b.fc2(F.gelu(b.fc1(b.ln2(x))))
        logits = self.head(self.lnf(x)).reshape(-1, self.s["vocab"])
        return F.cross_entropy(logits, target)


def clock(args):
    return time.process_time if args.clock == "cpu" else time.perf_counter


def torch_steps(s, sdpa, args):
    torch.manual_seed(1234)
    m = Model(s, sdpa)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
    idx = torch.randint(0, s["vocab"], (s["batch"], s["seq"]))
    target = torch.randint(0, s["vocab"], (s["batch"] * s["seq"],))
    now = clock(args)
    times = []
    for k in range(args.steps + 1):  # the first step warms up (optimizer state, allocations)
        t0 = now()
        if args.forward:
            with torch.no_grad():
                m(idx, target).item()
        else:
            opt.zero_grad(set_to_none=True)
            loss = m(idx, target)
            loss.backward()
            opt.step()
        if k:
            times.append((now() - t0) * 1e3)
    return times


def ours_steps(args):
    base = "small" if args.size == "small" else "gpt2-like"
    cmd = [args.dtensor, "bench", "train", "--json", "--size", base, "--steps",
           str(args.steps), "--threads", str(args.threads), "--clock", args.clock]
    for key, value in SIZES[args.size].items():
        cmd += ["--" + key, str(value)]
    if args.forward:
        cmd.append("--forward")
    cmd += ["--attention", args.ours_attention]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        j = json.loads(line)
        if j.get("name") == "gpt_step":
            return j
    raise RuntimeError("no gpt_step line from: " + " ".join(cmd))


def main():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--size", default="gpt2-like", choices=sorted(SIZES))
    p.add_argument("--forward", action="store_true", help="forward and loss only, no_grad")
    p.add_argument("--ours-attention", choices=("explicit", "sdpa"), default="explicit",
                   help="our step's attention: written out (default) or the fused op")
    p.add_argument("--clock", choices=("cpu", "wall"), default=None,
                   help="cpu (default with 1 thread) or wall (default with more)")
    args = p.parse_args()
    if args.clock is None:
        args.clock = "cpu" if args.threads == 1 else "wall"
    torch.set_num_threads(args.threads)
    s = SIZES[args.size]
    emit({"name": "machine", "torch": torch.__version__, "threads": args.threads,
          "size": args.size, "clock": args.clock, "pass": "forward" if args.forward else "step"})
    ms = {"explicit": [], "sdpa": [], "ours": []}
    for r in range(args.rounds):
        for side in ("explicit", "sdpa", "ours"):
            if side == "ours":
                j = ours_steps(args)
                ms["ours"].append(j["ms_per_step"])
                emit({"name": "sample", "side": "ours", "round": r, "ms": j["ms_per_step"],
                      "sgemm_gflops": j["sgemm_gflops"], "fraction_of_sgemm":
                      j["fraction_of_sgemm"]})
            else:
                t = torch_steps(s, side == "sdpa", args)
                ms[side].append(statistics.median(t))
                emit({"name": "sample", "side": "torch_" + side, "round": r,
                      "ms": round(statistics.median(t), 1)})
    ours = statistics.median(ms["ours"])
    for side in ("explicit", "sdpa"):
        t = statistics.median(ms[side])
        emit({"name": "summary", "torch_attention": side, "torch_ms": spread(ms[side]),
              "ours_ms": spread(ms["ours"]), "torch_over_ours": round(t / ours, 3),
              "rounds": args.rounds, "threads": args.threads, "size": args.size,
              "ours_attention": args.ours_attention,
              "pass": "forward" if args.forward else "step", "clock": args.clock})


if __name__ == "__main__":
    main()
