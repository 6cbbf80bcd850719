#!/usr/bin/env python3
"""Hugging Face models, transformers vs libdtensor, in one invocation: generation and fine-tuning.

The cases of `dtensor bench models`, one thread (torch.set_num_threads(1); ours: one BLAS
thread per rank). Both sides run the SAME model directory: ours writes a random model
(`dtensor bench models --size S --write-only`: a Llama, or GPT-2 for gpt2-small) and
transformers loads it with AutoModelForCausalLM.from_pretrained (float32).

Generation: greedy generation of --new tokens after a --prompt-id prompt (ids 3, 10, 17, ...
mod vocab) with a KV cache. Prefill tokens/s = prompt / (time of the forward over the prompt
and the first argmax); decode tokens/s = (new - 1) / (time of the remaining one-token forwards
with past_key_values, each with its argmax). The first round checks that transformers' greedy
ids equal ours (`dtensor generate` on the same prompt).

Training: a fine-tuning step on --batch x --seq token ids (ids[b][t] = (17 + 31 t + 997 b +
(7 t^2 mod 101)) mod V, the same formula as ours): zero_grad(set_to_none), model(input_ids,
labels=input_ids).loss (the causal-LM cross-entropy), backward, torch.optim.AdamW(lr 1e-3,
betas (0.9, 0.95), eps 1e-8, weight_decay 0.1; PyTorch's default implementation for CPU
tensors). Tokens/s = batch x seq / step time. Each side starts from the loaded weights, one
warm-up step then --reps steps: the first round prints both sides' losses of every step and the
largest relative difference (they must agree).

The two sides alternate for --rounds rounds (transformers, ours, ...); a round is --reps runs
after one warm-up, median and min..max. Ours reports 1 rank and TP 2 (threads); transformers
1 process (its tensor parallelism needs torchrun: not run). Summary ratios ours /
transformers (> 1: ours faster).

Usage: models.py [--dtensor build/dtensor] [--rounds 3] [--size small|tiny|gpt2-small]
                 [--only generate|train] [--prompt 64] [--new 32] [--batch 4] [--seq 64]
                 [--reps 5]
"""
import re
import shutil
import subprocess
import time

import peers_common as pc


def torch_run(model_dir, prompt, new, reps):
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
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


def train_ids(V, batch, seq):
    return [[(17 + 31 * t + 997 * b + (7 * t * t) % 101) % V for t in range(seq)]
            for b in range(batch)]


def torch_train(model_dir, batch, seq, reps):
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    ids = torch.tensor(train_ids(model.config.vocab_size, batch, seq), dtype=torch.long)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    tok_s, losses = [], []
    for r in range(-1, reps):  # step -1 warms up (its loss is kept)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        losses.append(loss.item())
        if r >= 0:
            tok_s.append(batch * seq / (t1 - t0))
    return tok_s, losses


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
    p.add_argument("--size", default="small", choices=["small", "tiny", "gpt2-small"])
    p.add_argument("--only", choices=["generate", "train"])
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    gen, train = a.only != "train", a.only != "generate"
    pc.emit(pc.machine_header(a.dtensor))
    # Our bench writes the model and keeps it: its path is on stderr.
    made = subprocess.run([a.dtensor, "bench", "models", "--size", a.size, "--write-only"],
                          capture_output=True, text=True, check=True)
    model_dir = re.search(r"the model is in (\S+)", made.stderr).group(1)
    common = ["--model", model_dir, "--prompt", str(a.prompt), "--new", str(a.new),
              "--batch", str(a.batch), "--seq", str(a.seq), "--reps", str(a.reps)]
    if a.only:
        common += ["--only", a.only]
    phases = (["prefill", "decode"] if gen else []) + (["train"] if train else [])
    rows = {side: {ph: [] for ph in phases} for side in ("transformers", "ours_1rank", "ours_tp2")}
    import json
    V = json.load(open(model_dir + "/config.json"))["vocab_size"]
    try:
        for r in range(a.rounds):
            line = dict(name="models_round", side="transformers", round=r)
            if gen:
                pre, dec, ids = torch_run(model_dir, a.prompt, a.new, a.reps)
                sp, sd = pc.spread(pre), pc.spread(dec)
                rows["transformers"]["prefill"].append(sp["median"])
                rows["transformers"]["decode"].append(sd["median"])
                line.update(prefill_tok_s=round(sp["median"], 2),
                            prefill_range=[round(sp["min"], 2), round(sp["max"], 2)],
                            decode_tok_s=round(sd["median"], 2),
                            decode_range=[round(sd["min"], 2), round(sd["max"], 2)])
                if r == 0:
                    line["same_greedy_ids_as_ours"] = ids == ours_ids(a.dtensor, model_dir,
                                                                      a.prompt, a.new, V)
            if train:
                tok, losses = torch_train(model_dir, a.batch, a.seq, a.reps)
                st = pc.spread(tok)
                rows["transformers"]["train"].append(st["median"])
                line.update(train_tok_s=round(st["median"], 2),
                            train_range=[round(st["min"], 2), round(st["max"], 2)],
                            losses=[round(x, 7) for x in losses])
            pc.emit(line)
            ours = {l["name"]: l for l in pc.run_ours(a.dtensor, ["models"] + common)}
            out = dict(name="models_round", side="ours", round=r)
            for phase in phases:
                o = ours["models_" + phase]
                rows["ours_1rank"][phase].append(o["rank1_tok_s"])
                rows["ours_tp2"][phase].append(o["tp2_tok_s"])
                out[phase + "_1rank"] = o["rank1_tok_s"]
                out[phase + "_tp2"] = o["tp2_tok_s"]
            if train:
                o = ours["models_train"]
                out["losses_1rank"] = o["rank1_losses"]
                out["losses_tp2"] = o["tp2_losses"]
                worst = max(abs(x - y) / abs(y) for side in ("rank1_losses", "tp2_losses")
                            for x, y in zip(o[side], losses))
                out["max_rel_loss_diff_vs_transformers"] = float("%.3g" % worst)
            pc.emit(out)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    out = {"name": "models_peer", "size": a.size, "prompt": a.prompt, "new": a.new,
           "batch": a.batch, "seq": a.seq, "rounds": a.rounds, "reps": a.reps}
    for side, by_phase in rows.items():
        for phase, meds in by_phase.items():
            out["%s_%s_tok_s" % (side, phase)] = round(pc.spread(meds)["median"], 2)
    for phase in phases:
        t = out["transformers_%s_tok_s" % phase]
        out["ratio_%s_1rank" % phase] = pc.ratio(out["ours_1rank_%s_tok_s" % phase], t)
        out["ratio_%s_tp2" % phase] = pc.ratio(out["ours_tp2_%s_tok_s" % phase], t)
    pc.emit(out)


if __name__ == "__main__":
    main()
