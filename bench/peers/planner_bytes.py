"""Bytes moved, case for case: random (op, mesh, shapes, placements) cases run with PyTorch
DTensor and with ours (`dtensor plan --stdin --json`), both on a fake process group as rank 0,
counting each collective's bytes the same way: the larger buffer of the collective on rank 0
(all_gather: the gathered output, reduce_scatter: the input, all_reduce: the buffer,
all_to_all: the larger of input and output), as our comm ledger does.

Prints JSON lines: one per case (op, mesh, shapes, placements, attributes; PyTorch's bytes,
collectives and output placements or its error; ours likewise; "cmp": fewer / equal / more
for ours), then one line per class of cases where ours moves more (op, mesh, placements), then
a summary.

    /work/venv-torch/bin/python bench/peers/planner_bytes.py --dtensor build/dtensor --cases 1200

Not part of the build or CI; needs torch (2.15 used)."""
import argparse
import json
import os
import random
import subprocess
import sys
from collections import defaultdict

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MESHES = [(4,), (2, 2), (3,), (2, 3)]

UNARY = ["exp", "relu", "neg", "tanh", "sigmoid", "gelu", "silu", "abs"]
MONOTONE = {"exp", "relu", "tanh", "sigmoid"}  # keep Partial(max) in principle
BINARY = ["add", "mul", "sub", "div", "maximum"]
SCALAR = ["add_scalar", "mul_scalar"]
REDUCE = ["sum", "mean", "amax", "amin"]


# ---- Case generation ---------------------------------------------------------------------------

def size(rng):
    return rng.randint(1, 9)


def placements(rng, mesh, ndim, partial=True, pmax=False):
    """One placement per mesh dim: R, S<d>, Psum (if partial), Pmax (if pmax)."""
    out = []
    for _ in mesh:
        kinds = ["R"] * 3 + (["S"] * 3 if ndim > 0 else []) + (["Psum"] * 2 if partial else [])
        kinds += ["Pmax"] * 2 if pmax else []
        k = rng.choice(kinds)
        out.append("S%d" % rng.randrange(ndim) if k == "S" else k)
    # PyTorch and we both refuse mixing partial kinds on one tensor; keep one kind
    kinds = {p for p in out if p.startswith("P")}
    if len(kinds) > 1:
        out = [p if not p.startswith("P") else "Psum" for p in out]
    return out


def arg(rng, mesh, shape, partial=True, pmax=False, dtype=None):
    a = {"shape": list(shape), "placements": placements(rng, mesh, len(shape), partial, pmax)}
    if dtype:
        a["dtype"] = dtype
    return a


def gen_case(rng, i):
    mesh = list(rng.choice(MESHES))
    fam = rng.choice(["unary", "binary", "scalar", "reduce", "softmax", "mm", "matmul", "bmm",
                      "linear", "addmm", "view", "transpose", "cat", "stack", "embedding",
                      "layer_norm"])
    m, n, k, b = size(rng), size(rng), size(rng), size(rng)
    attrs = {}
    if fam == "unary":
        op = rng.choice(UNARY)
        args = [arg(rng, mesh, (m, n), pmax=op in MONOTONE)]
    elif fam == "binary":
        op = rng.choice(BINARY)
        other = rng.choice([(m, n), (n,), (1, n), (m, 1)])
        args = [arg(rng, mesh, (m, n)), arg(rng, mesh, other)]
    elif fam == "scalar":
        op = rng.choice(SCALAR)
        attrs["scalar"] = rng.choice([2.5, -3.0])
        args = [arg(rng, mesh, (m, n), pmax=True)]
    elif fam == "reduce":
        op = rng.choice(REDUCE)
        shape = (m, n) if rng.random() < 0.6 else (m, n, k)
        dims = sorted(rng.sample(range(len(shape)), rng.randint(1, len(shape))))
        attrs["dim"] = dims
        attrs["keepdim"] = rng.random() < 0.4
        args = [arg(rng, mesh, shape, pmax=op in ("amax",))]
    elif fam == "softmax":
        op = rng.choice(["softmax", "log_softmax"])
        shape = (m, n) if rng.random() < 0.7 else (b, m, n)
        attrs["dim"] = [rng.choice(list(range(len(shape))) + [-1])]
        args = [arg(rng, mesh, shape, partial=False)]
    elif fam == "mm":
        op = "mm"
        args = [arg(rng, mesh, (m, k)), arg(rng, mesh, (k, n))]
    elif fam == "matmul":
        op = "matmul"
        sa, sb = rng.choice([((k,), (k,)), ((m, k), (k,)), ((k,), (k, n)), ((b, m, k), (k, n)),
                             ((b, m, k), (b, k, n)), ((m, k), (k, n))])
        args = [arg(rng, mesh, sa), arg(rng, mesh, sb)]
    elif fam == "bmm":
        op = "bmm"
        args = [arg(rng, mesh, (b, m, k)), arg(rng, mesh, (b, k, n))]
    elif fam == "linear":
        op = "linear"
        x = (m, k) if rng.random() < 0.6 else (b, m, k)
        args = [arg(rng, mesh, x), arg(rng, mesh, (n, k))]
        if rng.random() < 0.6:
            args.append(arg(rng, mesh, (n,)))
    elif fam == "addmm":
        op = "addmm"
        bias = (n,) if rng.random() < 0.6 else (m, n)
        args = [arg(rng, mesh, bias), arg(rng, mesh, (m, k)), arg(rng, mesh, (k, n))]
    elif fam == "view":
        op = rng.choice(["view", "reshape", "flatten"])
        shape = (m, n) if rng.random() < 0.6 else (b, m, n)
        args = [arg(rng, mesh, shape)]
        if op == "flatten":
            start = rng.randrange(len(shape) - 1)
            attrs["start"], attrs["end"] = start, rng.randrange(start + 1, len(shape))
        elif len(shape) == 2 or rng.random() < 0.5:
            attrs["shape"] = [-1]
        else:
            attrs["shape"] = [b * m, n] if rng.random() < 0.5 else [b, m * n]
    elif fam == "transpose":
        shape = (m, n) if rng.random() < 0.6 else (b, m, n)
        if len(shape) == 2 or rng.random() < 0.5:
            op = "transpose"
            attrs["dim0"], attrs["dim1"] = rng.sample(range(len(shape)), 2)
        else:
            op = "permute"
            attrs["dims"] = rng.sample(range(3), 3)
        args = [arg(rng, mesh, shape)]
    elif fam in ("cat", "stack"):
        op = fam
        count = rng.randint(2, 3)
        if op == "cat":
            d = rng.randrange(2)
            shapes = [tuple(size(rng) if j == d else (m, n)[j] for j in range(2))
                      for _ in range(count)]
        else:
            d = rng.randrange(3)
            shapes = [(m, n)] * count
        attrs["dim"] = [d]
        args = [arg(rng, mesh, s) for s in shapes]
    elif fam == "embedding":
        op = "embedding"
        v = rng.randint(2, 13)
        idx = (m,) if rng.random() < 0.5 else (b, m)
        args = [arg(rng, mesh, (v, n)), arg(rng, mesh, idx, partial=False, dtype="i64")]
    else:
        op = "layer_norm"
        shape = (m, n) if rng.random() < 0.6 else (b, m, n)
        args = [arg(rng, mesh, shape, partial=rng.random() < 0.5)]
        if rng.random() < 0.5:
            args += [arg(rng, mesh, (n,), partial=False), arg(rng, mesh, (n,), partial=False)]
    return {"id": i, "mesh": mesh, "op": op, "args": args, "attrs": attrs}


def has_empty_shard(mesh, a):
    """Whether some rank's shard of argument a has no elements (torch.chunk pieces, mesh dims
    sharding the same tensor dim splitting it in mesh-dim order). PyTorch's Partial(max/min)
    results of amax/amin are then not computable on that rank (a max of nothing raises)."""
    import itertools
    for coord in itertools.product(*[range(w) for w in mesh]):
        size = list(a["shape"])
        for m, p in enumerate(a["placements"]):
            if p.startswith("S"):
                d = int(p[1:])
                piece = -(-size[d] // mesh[m])
                size[d] = max(0, min(piece, size[d] - coord[m] * piece))
        if any(x == 0 for x in size):
            return True
    return False


# ---- PyTorch side -------------------------------------------------------------------------------

def torch_side(cases):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ledger(TorchDispatchMode):
        """Counts collectives on rank 0: the larger of all input and all output bytes."""

        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if any(t is DTensor for t in types):
                return NotImplemented  # let DTensor desugar into collectives first
            out = func(*args, **kwargs)
            ns = func.namespace
            name = func._overloadpacket.__name__
            if ns in ("_c10d_functional", "c10d_functional", "c10d") and name not in (
                    "wait_tensor", "_wrap_tensor_autograd"):
                def nbytes(x):
                    if isinstance(x, torch.Tensor):
                        return x.numel() * x.element_size()
                    if isinstance(x, (list, tuple)):
                        return sum(nbytes(y) for y in x)
                    return 0
                b = max(nbytes(list(args)) + nbytes(list(kwargs.values())), nbytes(out))
                self.calls.append((name, b))
            return out

    world = {}

    def mesh_of(shape):
        w = 1
        for s in shape:
            w *= s
        if w not in world:
            if dist.is_initialized():
                dist.destroy_process_group()
            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=w)
            world.clear()
            world[w] = {}
        meshes = world[w]
        if tuple(shape) not in meshes:
            meshes[tuple(shape)] = init_device_mesh("cpu", tuple(shape))
        return meshes[tuple(shape)]

    def placement(p):
        if p == "R":
            return Replicate()
        if p.startswith("S"):
            return Shard(int(p[1:]))
        return Partial({"Psum": "sum", "Pmax": "max", "Pmin": "min", "Pavg": "avg"}[p])

    def short(p):
        s = str(p)
        if isinstance(p, Replicate):
            return "R"
        if type(p).__name__ == "_StridedShard":
            return "SS(%d,%d)" % (p.dim, p.split_factor)
        if isinstance(p, Shard):
            return "S(%d)" % p.dim
        if isinstance(p, Partial):
            return "P(%s)" % p.reduce_op
        return s

    def make(mesh, a):
        pl = [placement(p) for p in a["placements"]]
        shape = a["shape"]
        as_rep = [Replicate() if isinstance(p, Partial) else p for p in pl]
        local_shape, _ = compute_local_shape_and_global_offset(shape, mesh, as_rep)
        dtype = torch.int64 if a.get("dtype") == "i64" else torch.float32
        local = torch.zeros(local_shape, dtype=dtype) if dtype == torch.int64 else \
            torch.full(local_shape, 0.5)
        stride = torch.empty(shape).stride() if len(shape) else ()
        return DTensor.from_local(local, mesh, pl, run_check=False, shape=torch.Size(shape),
                                  stride=stride)

    def run(c, x):
        op, at = c["op"], c["attrs"]
        unary = {"exp": torch.exp, "relu": torch.relu, "neg": torch.neg, "tanh": torch.tanh,
                 "sigmoid": torch.sigmoid, "gelu": F.gelu, "silu": F.silu, "abs": torch.abs}
        binary = {"add": torch.add, "mul": torch.mul, "sub": torch.sub, "div": torch.div,
                  "maximum": torch.maximum, "mm": torch.mm, "matmul": torch.matmul,
                  "bmm": torch.bmm}
        if op in unary:
            return unary[op](x[0])
        if op in binary:
            return binary[op](x[0], x[1])
        if op == "add_scalar":
            return x[0] + at["scalar"]
        if op == "mul_scalar":
            return x[0] * at["scalar"]
        if op in REDUCE:
            fn = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax,
                  "amin": torch.amin}[op]
            return fn(x[0], dim=at["dim"], keepdim=at.get("keepdim", False))
        if op == "softmax":
            return torch.softmax(x[0], at["dim"][0])
        if op == "log_softmax":
            return torch.log_softmax(x[0], at["dim"][0])
        if op == "linear":
            return F.linear(x[0], x[1], x[2] if len(x) > 2 else None)
        if op == "addmm":
            return torch.addmm(x[0], x[1], x[2])
        if op == "view":
            return x[0].view(at["shape"])
        if op == "reshape":
            return x[0].reshape(at["shape"])
        if op == "flatten":
            return torch.flatten(x[0], at["start"], at["end"])
        if op == "transpose":
            return x[0].transpose(at["dim0"], at["dim1"])
        if op == "permute":
            return x[0].permute(at["dims"])
        if op == "cat":
            return torch.cat(x, at["dim"][0])
        if op == "stack":
            return torch.stack(x, at["dim"][0])
        if op == "embedding":
            return F.embedding(x[1], x[0])
        if op == "layer_norm":
            n = x[0].shape[-1:]
            return F.layer_norm(x[0], n, x[1] if len(x) > 1 else None,
                                x[2] if len(x) > 2 else None)
        raise ValueError("no PyTorch call for " + op)

    results = {}
    for c in cases:
        r = {}
        try:
            mesh = mesh_of(c["mesh"])
            x = [make(mesh, a) for a in c["args"]]
            led = Ledger()
            with led:
                y = run(c, x)
            r = {"ok": True, "out_placements": [short(p) for p in y.placements],
                 "out_shape": list(y.shape), "bytes": sum(b for _, b in led.calls),
                 "collectives": [[n, b] for n, b in led.calls]}
        except Exception as e:  # PyTorch refusing a case is a result, not a failure of the run
            msg = (str(e).strip().splitlines() or [type(e).__name__])[0]
            r = {"ok": False, "error": (type(e).__name__ + ": " + msg)[:300]}
        results[c["id"]] = r
    if dist.is_initialized():
        dist.destroy_process_group()
    return results


# ---- Our side -----------------------------------------------------------------------------------

def plan_case(c):
    """A case as `dtensor plan` takes it: the op by its ATen base name, attributes by the names
    of the op's schema (the tool calls every op of the list through its schema)."""
    op, at = c["op"], dict(c["attrs"])
    if op in SCALAR:
        op = op[:-len("_scalar")]
        at["other"] = at.pop("scalar")
    elif op == "flatten":
        at["start_dim"], at["end_dim"] = at.pop("start"), at.pop("end")
    elif op == "view":
        at["size"] = at.pop("shape")
    elif op in ("softmax", "log_softmax", "cat", "stack"):
        at["dim"] = at["dim"][0]
    elif op == "layer_norm":
        at["normalized_shape"] = [c["args"][0]["shape"][-1]]
    return dict(c, op=op, attrs=at)


def our_side(dtensor, cases):
    text = "".join(json.dumps(plan_case(c)) + "\n" for c in cases)
    p = subprocess.run([dtensor, "plan", "--stdin", "--json"], input=text, capture_output=True,
                       text=True, check=False)
    if p.returncode != 0:
        sys.exit("dtensor plan --stdin failed (%d): %s" % (p.returncode, p.stderr))
    out = {}
    for line in p.stdout.splitlines():
        r = json.loads(line)
        out[r["id"]] = r
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtensor", default=os.path.join(REPO, "build", "dtensor"))
    ap.add_argument("--cases", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--quiet", action="store_true", help="print only the classes and summary")
    a = ap.parse_args()

    rng = random.Random(a.seed)
    cases = [gen_case(rng, i) for i in range(a.cases)]
    ours = our_side(a.dtensor, cases)
    theirs = torch_side(cases)

    tally = defaultdict(int)
    total = {"torch": 0, "ours": 0}
    classes = defaultdict(list)
    for c in cases:
        t, o = theirs[c["id"]], ours.get(c["id"], {"ok": False, "error": "no answer"})
        line = {"id": c["id"], "op": c["op"], "mesh": c["mesh"],
                "shapes": [x["shape"] for x in c["args"]],
                "placements": [x["placements"] for x in c["args"]], "attrs": c["attrs"],
                "torch": t, "ours": {k: v for k, v in o.items()
                                     if k not in ("id", "op", "mesh")}}
        tally["cases"] += 1
        if not t["ok"]:
            tally["torch_failed"] += 1
        if not o["ok"]:
            tally["ours_failed"] += 1
        if t["ok"] and not o["ok"]:
            tally["ours_failed_torch_ok"] += 1
        if t["ok"] and o["ok"]:
            tally["both_ok"] += 1
            total["torch"] += t["bytes"]
            total["ours"] += o["bytes"]
            cmp = "fewer" if o["bytes"] < t["bytes"] else "more" if o["bytes"] > t["bytes"] \
                else "equal"
            tally["ours_" + cmp] += 1
            line["cmp"] = cmp
            if cmp == "more" and any(has_empty_shard(c["mesh"], x) for x in c["args"]):
                line["empty_shard"] = True
            if cmp == "more":
                key = (c["op"], "x".join(map(str, c["mesh"])),
                       " ".join(",".join(x["placements"]) for x in c["args"]))
                classes[key].append(line)
        if not a.quiet:
            print(json.dumps(line))
    for (op, mesh, pl), lines in sorted(classes.items()):
        ex = lines[0]
        print(json.dumps({"class": {"op": op, "mesh": mesh, "placements": pl},
                          "cases": len(lines),
                          "empty_shard": sum(1 for x in lines if x.get("empty_shard")),
                          "torch_bytes": sum(x["torch"]["bytes"] for x in lines),
                          "ours_bytes": sum(x["ours"]["bytes"] for x in lines),
                          "example": {"id": ex["id"], "shapes": ex["shapes"],
                                      "attrs": ex["attrs"],
                                      "torch": [ex["torch"]["out_placements"],
                                                ex["torch"]["collectives"]],
                                      "ours": [ex["ours"]["out_placements"],
                                               ex["ours"]["collectives"]]}}))
    summary = dict(tally)
    summary.update({"summary": True, "seed": a.seed, "torch_bytes": total["torch"],
                    "ours_bytes": total["ours"], "classes_more": len(classes)})
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
