#!/usr/bin/env python3
"""PyTorch's compute_utilization (torch/_functorch/benchmark_utils.py), restated without torch,
to compare its figures and its time with `dtensor trace stats` on the same trace. Not run in
CI. Usage: pytorch_utilization.py TRACE.json [TOTAL_US]"""
import json
import sys
import time


def duration(events):
    if not events:
        return 0
    end = events[0]["ts"] + events[0]["dur"]
    total = events[0]["dur"]
    for e in events[1:]:
        start = max(e["ts"], end)
        stop = e["ts"] + e["dur"]
        total += max(stop - start, 0)
        end = max(end, stop)
    return total


def main():
    t0 = time.perf_counter()
    with open(sys.argv[1]) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    gpu_pids = [e["pid"] for e in events if e.get("name") == "process_labels" and "GPU" in e["args"]["labels"]]
    gpu = sorted((e for e in events if e.get("pid") in gpu_pids and e.get("ph") == "X"), key=lambda e: e["ts"])
    words = ("gemm", "conv", "cutlass", "wgrad")
    mm = [e for e in gpu if any(w in e.get("name", "") for w in words)]
    busy, mm_busy = duration(gpu), duration(mm)
    total = float(sys.argv[2]) if len(sys.argv) > 2 else (max(e["ts"] + e["dur"] for e in gpu) - gpu[0]["ts"])
    t1 = time.perf_counter()
    print(json.dumps({"events": len(gpu), "busy_us": busy, "total_us": total,
                      "utilization": busy / total, "mm_fraction": mm_busy / total,
                      "seconds": round(t1 - t0, 3)}))


if __name__ == "__main__":
    main()
