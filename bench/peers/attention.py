"""PyTorch twin of `dtensor bench models --attention-memory`: causal attention on q, k, v
[B, H, T, E] float32, F.scaled_dot_product_attention(is_causal=True) and the composition
(matmul, * scale, masked_fill of a [T, T] triu, softmax, matmul), the forward alone and forward +
backward (incoming gradient randn), process CPU time, torch.set_num_threads(--threads). Rounds
alternate: PyTorch, then `dtensor bench models --attention-memory --json --reps 1` in a
subprocess, ...; prints a JSON line per side and round, then the medians and the ratios.

    python bench/peers/attention.py --dtensor build/dtensor [--rounds 3] [--threads 1] \
        [--batch 1 --heads 12 --seq 2048 --head-dim 64]
"""
import argparse
import json
import math
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F


def clock_s():
    return time.process_time()


def torch_round(a):
    g = torch.Generator().manual_seed(1)
    shape = (a.batch, a.heads, a.seq, a.head_dim)
    q, k, v, grad = (torch.randn(*shape, generator=g) for _ in range(4))
    mask = torch.ones(a.seq, a.seq, dtype=torch.bool).triu(1)
    scale = 1.0 / math.sqrt(a.head_dim)

    def composition():
        s = torch.matmul(q, k.transpose(2, 3)) * scale
        return torch.matmul(torch.softmax(s.masked_fill(mask, float("-inf")), -1), v)

    def fused():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    row = {}
    for name, fn in (("fused", fused), ("unfused", composition)):
        for backward in (False, True):
            for t in (q, k, v):
                t.requires_grad_(backward)
                t.grad = None
            t0 = clock_s()
            out = fn()
            if backward:
                out.backward(grad)
            row[f"{name}_{'' if backward else 'fwd_'}cpu_s"] = clock_s() - t0
            del out
    return row


def ours_round(a):
    cmd = [a.dtensor, "bench", "models", "--attention-memory", "--json", "--reps", "1",
           "--threads", str(a.threads), "--batch", str(a.batch), "--heads", str(a.heads),
           "--seq", str(a.seq), "--head-dim", str(a.head_dim)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        j = json.loads(line)
        if j.get("name") == "models_attention_memory":
            return {k: j[k] for k in ("fused_fwd_cpu_s", "unfused_fwd_cpu_s", "fused_cpu_s",
                                      "unfused_cpu_s")}
    raise RuntimeError("no models_attention_memory line from " + " ".join(cmd))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtensor", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--head-dim", type=int, default=64)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(json.dumps({"name": "machine", "torch": torch.__version__, "threads": a.threads,
                      "shape": [a.batch, a.heads, a.seq, a.head_dim], "clock": "process cpu"}))
    torch_round(a)  # warm-up
    results = {"torch": [], "ours": []}
    for r in range(a.rounds):
        for side in ("torch", "ours"):
            row = torch_round(a) if side == "torch" else ours_round(a)
            results[side].append(row)
            print(json.dumps({"name": "sample", "side": side, "round": r,
                              **{k: round(x, 4) for k, x in row.items()}}))
    med = {side: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
           for side, rows in results.items()}
    for key in ("fused_fwd_cpu_s", "fused_cpu_s", "unfused_fwd_cpu_s", "unfused_cpu_s"):
        print(json.dumps({"name": "summary", "case": key, "torch_s": round(med["torch"][key], 4),
                          "ours_s": round(med["ours"][key], 4),
                          "torch_over_ours": round(med["torch"][key] / med["ours"][key], 2),
                          "rounds": a.rounds}))


if __name__ == "__main__":
    main()
