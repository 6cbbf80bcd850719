"""PyTorch twin of `dtensor bench train --size S --tp 2 | --fsdp 2` (bench/bench_gpt_dist.c): the
GPT-2-like decoder of gpt_train.py with q, k and v as three Linears (as ours on 2 ranks), one
training step (zero_grad, forward, cross_entropy, backward, AdamW lr 3e-4) on 2 processes over
gloo (torch.multiprocessing spawn, MASTER_ADDR 127.0.0.1), one thread each:

  tp    parallelize_module with Megatron's plan: q, k, v ColwiseParallel, out RowwiseParallel,
        fc1 ColwiseParallel, fc2 RowwiseParallel, the LM head ColwiseParallel with Shard(-1)
        DTensor logits (use_local_output=False) into F.cross_entropy under loss_parallel();
        embeddings and LayerNorms replicated, the sequence not split; each rank's attention
        runs on its heads / 2 heads.
  fsdp  fully_shard on every block, then on the root (FSDP2); each rank takes half the batch.

Each rank times each step in its process CPU time (the gloo threads included) and wall time,
after a warm-up step and a barrier. Rounds alternate: PyTorch tp, ours tp, PyTorch fsdp, ours
fsdp (`dtensor bench train --size S --tp 2 --json`, one gpt_step line per rank: the rank
thread's CPU time); prints JSON lines per side, mode and round (the slower rank's median), then
per mode the medians over rounds, their spreads and the ratio PyTorch / ours (> 1: ours
faster), for CPU time and for wall time.

    python bench/peers/gpt_parallel.py --dtensor build/dtensor [--rounds 3] [--steps 2] \\
        [--size gpt2-like|small|gpt2-small-width] [--only tp|fsdp] [--layers L] [--batch B]

Not part of the build or CI; needs torch (the CPU build is enough).
"""
import json
import math
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

from peers_common import emit, machine_header, parser, spawn, spread

SIZES = {
    "gpt2-like": dict(vocab=8192, dmodel=512, heads=8, layers=4, seq=256, batch=8),
    "small": dict(vocab=1024, dmodel=128, heads=4, layers=2, seq=64, batch=4),
    # GPT-2 small's width (d_model 768, 12 heads, seq 512); layers and batch set on the command line
    "gpt2-small-width": dict(vocab=8192, dmodel=768, heads=12, layers=2, seq=512, batch=4),
}


class Block(torch.nn.Module):
    def __init__(self, s):
        super().__init__()
        d = s["dmodel"]
        self.hd = d // s["heads"]
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))
        self.out = torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.ones(s["seq"], s["seq"], dtype=torch.bool).triu(1))

    def forward(self, x):
        h = self.ln_1(x)
        q, k, v = self.q(h), self.k(h), self.v(h)
        b, t, w = q.shape  # w: d_model, or this rank's heads x head_dim under TP
        q, k, v = (z.reshape(b, t, w // self.hd, self.hd).transpose(1, 2) for z in (q, k, v))
        sc = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(self.hd))
        a = torch.softmax(sc.masked_fill(self.mask, float("-inf")), -1) @ v
        x = x + self.out(a.transpose(1, 2).reshape(b, t, w))
        return x + self.fc2(F.gelu(self.fc1(self.ln_2(x))))


class Model(torch.nn.Module):
    def __init__(self, s):
        super().__init__()
        d, v, t = s["dmodel"], s["vocab"], s["seq"]
        self.vocab = v
        self.tok = torch.nn.Embedding(v, d)
        self.pos = torch.nn.Parameter(torch.randn(t, d) * 0.02)
        self.h = torch.nn.ModuleList(Block(s) for _ in range(s["layers"]))
        self.ln_f = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, v, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos
        for b in self.h:
            x = b(x)
        return self.head(self.ln_f(x)).reshape(-1, self.vocab)


def rank_steps(rank, world, s, mode, steps):
    """Runs on each rank (peers_common.spawn): returns [(cpu_ms, wall_ms) per rank] of the
    median step, and the losses."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    torch.manual_seed(1234)
    m = Model(s)
    idx = torch.randint(0, s["vocab"], (s["batch"], s["seq"]))
    target = torch.randint(0, s["vocab"], (s["batch"] * s["seq"],))
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=(mode,))
    if mode == "tp":
        from torch.distributed.tensor import Shard
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       loss_parallel, parallelize_module)
        plan = {"head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)}
        for i in range(s["layers"]):
            for name in ("q", "k", "v", "fc1"):
                plan["h.%d.%s" % (i, name)] = ColwiseParallel()
            for name in ("out", "fc2"):
                plan["h.%d.%s" % (i, name)] = RowwiseParallel()
        parallelize_module(m, mesh, plan)
        ctx = loss_parallel
    else:
        from contextlib import nullcontext
        from torch.distributed.fsdp import fully_shard
        for b in m.h:
            fully_shard(b, mesh=mesh)
        fully_shard(m, mesh=mesh)
        rows = s["batch"] // world
        idx = idx[rank * rows:(rank + 1) * rows]
        target = target[rank * rows * s["seq"]:(rank + 1) * rows * s["seq"]]
        ctx = nullcontext
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
    cpu, wall, losses = [], [], []
    for k in range(steps + 1):  # the first step warms up (optimizer state, allocations)
        dist.barrier()
        c0, w0 = time.process_time(), time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with ctx():
            loss = F.cross_entropy(m(idx), target)
            loss.backward()
        opt.step()
        value = loss.full_tensor().item() if hasattr(loss, "full_tensor") else loss.item()
        c1, w1 = time.process_time(), time.perf_counter()
        losses.append(value)
        if k:
            cpu.append((c1 - c0) * 1e3)
            wall.append((w1 - w0) * 1e3)
    mine = torch.tensor([statistics.median(cpu), statistics.median(wall)], dtype=torch.float64)
    every = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(every, mine)
    return {"ranks": [e.tolist() for e in every], "losses": losses}


def ours(args, mode):
    cmd = [args.dtensor, "bench", "train", "--json", "--size", args.base, "--steps",
           str(args.steps), "--" + mode, "2"]
    for key in ("vocab", "dmodel", "heads", "layers", "seq", "batch"):
        cmd += ["--" + key, str(args.s[key])]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(cmd), out.stderr))
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    ranks = [j for j in lines if j.get("name") == "gpt_step"]
    return {"ranks": [[j["ms_per_step"], j["wall_ms"]] for j in ranks],
            "losses": ranks[0]["losses"], "comm_bytes": [j["comm_bytes"] for j in ranks]}


def main():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--size", default="gpt2-like", choices=sorted(SIZES))
    p.add_argument("--only", choices=("tp", "fsdp"))
    for key in ("layers", "batch"):
        p.add_argument("--" + key, type=int)
    args = p.parse_args()
    args.s = dict(SIZES[args.size])
    for key in ("layers", "batch"):
        if getattr(args, key):
            args.s[key] = getattr(args, key)
    args.base = "small" if args.size == "small" else "gpt2-like"
    emit(machine_header(args.dtensor))
    emit({"name": "config", "size": args.size, **args.s, "steps": args.steps,
          "torch": torch.__version__, "ranks": 2, "threads_per_rank": 1})
    modes = [args.only] if args.only else ["tp", "fsdp"]
    samples = {(side, mode): {"cpu": [], "wall": []} for side in ("torch", "ours") for mode in modes}
    for r in range(args.rounds):
        for mode in modes:
            for side in ("torch", "ours"):
                res = spawn(2, rank_steps, args.s, mode, args.steps) if side == "torch" \
                    else ours(args, mode)
                cpu = max(x[0] for x in res["ranks"])  # the slower rank
                wall = max(x[1] for x in res["ranks"])
                samples[(side, mode)]["cpu"].append(cpu)
                samples[(side, mode)]["wall"].append(wall)
                emit({"name": "sample", "side": side, "mode": mode, "round": r,
                      "cpu_ms": round(cpu, 1), "wall_ms": round(wall, 1),
                      "ranks": [[round(v, 1) for v in x] for x in res["ranks"]],
                      "losses": [round(v, 5) for v in res["losses"]],
                      **({"comm_bytes": res["comm_bytes"]} if "comm_bytes" in res else {})})
    def r1(values):
        return spread([round(v, 1) for v in values])

    for mode in modes:
        t, o = samples[("torch", mode)], samples[("ours", mode)]
        emit({"name": "summary", "mode": mode, "size": args.size, **args.s,
              "torch_cpu_ms": r1(t["cpu"]), "ours_cpu_ms": r1(o["cpu"]),
              "torch_over_ours_cpu": round(statistics.median(t["cpu"]) /
                                           statistics.median(o["cpu"]), 3),
              "torch_wall_ms": r1(t["wall"]), "ours_wall_ms": r1(o["wall"]),
              "torch_over_ours_wall": round(statistics.median(t["wall"]) /
                                            statistics.median(o["wall"]), 3),
              "rounds": args.rounds})


if __name__ == "__main__":
    main()
