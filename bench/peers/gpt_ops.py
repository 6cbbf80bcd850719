"""PyTorch twin of `dtensor bench ops`: each non-GEMM op of the GPT-2-like step (bench/bench_gpt.h)
at the same shapes, forward and forward+backward, and AdamW over the model's parameter shapes,
timed in process CPU time like ours (torch.set_num_threads(--threads)). Rounds alternate: PyTorch,
then `dtensor bench ops --json` in a subprocess, ... ; prints JSON lines per side and round, then a
summary per op with the medians and the ratio PyTorch / ours (> 1: ours is faster).

    python bench/peers/gpt_ops.py --dtensor build/dtensor [--rounds 3] [--iters 5] [--size small]
"""
import argparse
import json
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

SIZES = {
    "gpt2-like": dict(vocab=8192, dmodel=512, heads=8, layers=4, seq=256, batch=8),
    "small": dict(vocab=1024, dmodel=128, heads=4, layers=2, seq=64, batch=4),
}


def cases(s):
    b, t, d, h, v = s["batch"], s["seq"], s["dmodel"], s["heads"], s["vocab"]
    g = torch.Generator().manual_seed(1)
    r = lambda *shape: torch.randn(*shape, generator=g)
    x, w, bias, col = r(b, t, d), r(d), r(d), r(b, t, 1)
    u, scores, logits, table = r(b * t, 4 * d), r(b, h, t, t), r(b * t, v), r(v, d)
    target = torch.randint(0, v, (b * t,), generator=g)
    idx = torch.randint(0, v, (b, t), generator=g)
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)
    x2, pos, heads = r(b, t, d), r(t, d), r(b, h, t, d // h)
    return [
        ("layer_norm", [x, w, bias], lambda: F.layer_norm(x, (d,), w, bias, 1e-5)),
        ("gelu", [u], lambda: F.gelu(u)),
        ("softmax", [scores], lambda: torch.softmax(scores, -1)),
        ("log_softmax", [logits], lambda: torch.log_softmax(logits, -1)),
        ("cross_entropy", [logits], lambda: F.cross_entropy(logits, target)),
        ("mul_btd_bt1", [x, col], lambda: x * col),
        ("add_btd_d", [x, bias], lambda: x + bias),
        ("mul_btd_d", [x, w], lambda: x * w),
        ("masked_fill", [scores], lambda: scores.masked_fill(mask, float("-inf"))),
        ("embedding", [table], lambda: F.embedding(idx, table)),
        ("add_btd_btd", [x, x2], lambda: x + x2),
        ("add_btd_td", [x, pos], lambda: x + pos),
        ("mul_scalar", [scores], lambda: scores * 0.125),
        ("merge_heads", [heads], lambda: heads.transpose(1, 2).reshape(b, t, d)),
        ("rms_norm", [x, w], lambda: F.rms_norm(x, (d,), w, 1e-5)),
    ]


def param_shapes(s):
    d, v, t = s["dmodel"], s["vocab"], s["seq"]
    shapes = [(v, d), (t, d), (d,), (d,), (v, d)]
    for _ in range(s["layers"]):
        shapes += [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,),
                   (4 * d, d), (4 * d,), (d, 4 * d), (d,)]
    return shapes


def clock_ms():
    return time.process_time() * 1e3


def torch_round(s, iters):
    rows = {}
    for name, leaves, fn in cases(s):
        for backward in (False, True):
            for leaf in leaves:
                leaf.requires_grad_(backward)
            out = fn()
            grad = None if out.dim() == 0 else torch.randn_like(out)
            samples = []
            for it in range(iters + 1):
                t0 = clock_ms()
                y = fn()
                if backward:
                    y.backward(grad)
                t1 = clock_ms()
                for leaf in leaves:
                    leaf.grad = None
                if it:
                    samples.append(t1 - t0)
            rows[(name, "fwd+bwd" if backward else "fwd")] = statistics.median(samples)
            for leaf in leaves:
                leaf.requires_grad_(False)
    params = [torch.nn.Parameter(torch.randn(*sh)) for sh in param_shapes(s)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params)
    opt.step()
    samples = []
    for _ in range(iters):
        t0 = clock_ms()
        opt.step()
        samples.append(clock_ms() - t0)
    rows[("adamw", "step")] = statistics.median(samples)
    return rows


def ours_round(args):
    cmd = [args.dtensor, "bench", "ops", "--json", "--iters", str(args.iters), "--threads",
           str(args.threads), "--size", args.size]
    rows = {}
    for op in ["layer_norm", "gelu", "softmax", "log_softmax", "cross_entropy", "mul_btd_bt1",
               "add_btd_d", "mul_btd_d", "masked_fill", "embedding", "add_btd_btd", "add_btd_td",
               "mul_scalar", "merge_heads", "rms_norm", "adamw"]:
        out = subprocess.run(cmd + ["--only", op], capture_output=True, text=True, check=True)
        for line in out.stdout.splitlines():
            j = json.loads(line)
            if j.get("name") == "op":
                rows[(j["op"], j["pass"])] = j["ours_ms"]
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtensor", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--size", default="gpt2-like", choices=sorted(SIZES))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    s = SIZES[args.size]
    print(json.dumps({"name": "machine", "torch": torch.__version__, "threads": args.threads,
                      "size": args.size, "clock": "process cpu"}))
    results = {"torch": [], "ours": []}
    for r in range(args.rounds):
        for side in ("torch", "ours"):
            rows = torch_round(s, args.iters) if side == "torch" else ours_round(args)
            results[side].append(rows)
            for (op, ps), ms in rows.items():
                print(json.dumps({"name": "sample", "side": side, "round": r, "op": op,
                                  "pass": ps, "ms": round(ms, 3)}))
    for key in results["torch"][0]:
        t = [r[key] for r in results["torch"]]
        o = [r[key] for r in results["ours"] if key in r]
        if not o:
            continue
        print(json.dumps({"name": "summary", "op": key[0], "pass": key[1],
                          "torch_ms": round(statistics.median(t), 3),
                          "ours_ms": round(statistics.median(o), 3),
                          "torch_over_ours": round(statistics.median(t) / statistics.median(o), 2),
                          "rounds": args.rounds}))


if __name__ == "__main__":
    main()
