#!/usr/bin/env python3
"""Hugging Face Llama generation, transformers vs libdtensor, in one invocation.

The case of `dtensor bench models`: greedy generation of --new tokens after a --prompt-id
prompt (ids 3, 10, 17, ... mod vocab) with a KV cache, one thread (torch.set_num_threads(1);
ours: one BLAS thread per rank). Prefill tokens/s = prompt / (time of the forward over the
prompt and the first argmax); decode tokens/s = (new - 1) / (time of the remaining one-token
forwards with past_key_values, each with its argmax). Both sides run the SAME model
directory: ours writes a random Llama (`dtensor bench models --size S --keep`), transformers
loads it with LlamaForCausalLM.from_pretrained (float32). The first round also checks that
transformers' greedy ids equal ours (`dtensor generate` on the same prompt). The two sides
alternate for --rounds rounds (transformers, ours, ...); a round is --reps runs after one
warm-up, median and min..max. Ours reports 1 rank and TP 2 (threads); transformers 1 process
(its tensor parallelism needs torchrun: not run). Summary ratios ours / transformers (> 1: ours
faster).

Usage: models.py [--dtensor build/dtensor] [--rounds 3] [--size small|tiny] [--prompt 64]
                 [--new 32] [--reps 5]
"""
import re
import shutil
import subprocess
import time

import peers_common as pc


def torch_run(model_dir, prompt, new, reps):
    import torch
    from transformers import LlamaForCausalLM

    torch.set_num_threads(1)
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    V = model.config.vocab_size
    ids = torch.tensor([[(3 + 7 * i) % V for i in range(prompt)]], dtype=torch.long)
    pre, dec, out_ids = [], [], None
    with torch.no_grad():
        for r in range(-1, reps):  # run -1 warms up
            t0 = time.perf_counter()
            out = model(input_ids=ids, use_cache=True)
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
            t1 = time.perf_counter()
            gen = [tok.item()]
            past = out.past_key_values
            for _ in range(new - 1):
                out = model(input_ids=tok, past_key_values=past, use_cache=True)
                past = out.past_key_values
                tok = out.logits[:, -1].argmax(-1, keepdim=True)
                gen.append(tok.item())
            t2 = time.perf_counter()
            if r >= 0:
                pre.append(prompt / (t1 - t0))
                dec.append((new - 1) / (t2 - t1))
            out_ids = gen
    return pre, dec, out_ids


def ours_ids(dtensor, model_dir, prompt, new, V):
    ids = ",".join(str((3 + 7 * i) % V) for i in range(prompt))
    out = subprocess.run([dtensor, "generate", "--model", model_dir, "--prompt-ids", ids,
                          "--max-new", str(new)], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        m = re.match(r"^ids:?\s*(.*)$", line.strip())
        if m:
            return [int(x) for x in re.split(r"[ ,]+", m.group(1).strip()) if x][prompt:]
    return None


def main():
    p = pc.parser(__doc__.split("\n")[0])
    p.add_argument("--size", default="small", choices=["small", "tiny"])
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    pc.emit(pc.machine_header(a.dtensor))
    # Our bench writes the model and keeps it: its path is on stderr.
    cmd = [a.dtensor, "bench", "models", "--size", a.size, "--keep", "--reps", "1",
           "--prompt", str(a.prompt), "--new", str(a.new), "--json"]
    made = subprocess.run(cmd, capture_output=True, text=True, check=True)
    model_dir = re.search(r"the model is in (\S+)", made.stderr).group(1)
    common = ["--model", model_dir, "--prompt", str(a.prompt), "--new", str(a.new),
              "--reps", str(a.reps)]
    rows = {"transformers": {"prefill": [], "decode": []},
            "ours_1rank": {"prefill": [], "decode": []},
            "ours_tp2": {"prefill": [], "decode": []}}
    try:
        for r in range(a.rounds):
            pre, dec, gen = torch_run(model_dir, a.prompt, a.new, a.reps)
            sp, sd = pc.spread(pre), pc.spread(dec)
            rows["transformers"]["prefill"].append(sp["median"])
            rows["transformers"]["decode"].append(sd["median"])
            line = dict(name="models_round", side="transformers", round=r,
                        prefill_tok_s=round(sp["median"], 2),
                        prefill_range=[round(sp["min"], 2), round(sp["max"], 2)],
                        decode_tok_s=round(sd["median"], 2),
                        decode_range=[round(sd["min"], 2), round(sd["max"], 2)])
            if r == 0:
                import json
                V = json.load(open(model_dir + "/config.json"))["vocab_size"]
                line["same_greedy_ids_as_ours"] = gen == ours_ids(a.dtensor, model_dir, a.prompt,
                                                                  a.new, V)
            pc.emit(line)
            ours = {l["name"]: l for l in pc.run_ours(a.dtensor, ["models"] + common)}
            for phase in ("prefill", "decode"):
                o = ours["models_" + phase]
                rows["ours_1rank"][phase].append(o["rank1_tok_s"])
                rows["ours_tp2"][phase].append(o["tp2_tok_s"])
            pc.emit(dict(name="models_round", side="ours", round=r,
                         prefill_1rank=ours["models_prefill"]["rank1_tok_s"],
                         prefill_tp2=ours["models_prefill"]["tp2_tok_s"],
                         decode_1rank=ours["models_decode"]["rank1_tok_s"],
                         decode_tp2=ours["models_decode"]["tp2_tok_s"]))
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    out = {"name": "models_peer", "size": a.size, "prompt": a.prompt, "new": a.new,
           "rounds": a.rounds, "reps": a.reps}
    for side, phases in rows.items():
        for phase, meds in phases.items():
            out["%s_%s_tok_s" % (side, phase)] = round(pc.spread(meds)["median"], 2)
    for phase in ("prefill", "decode"):
        t = out["transformers_%s_tok_s" % phase]
        out["ratio_%s_1rank" % phase] = pc.ratio(out["ours_1rank_%s_tok_s" % phase], t)
        out["ratio_%s_tp2" % phase] = pc.ratio(out["ours_tp2_%s_tok_s" % phase], t)
    pc.emit(out)


if __name__ == "__main__":
    main()
