#!/usr/bin/env python3
"""Trains the zoo's char_lstm with `cldl train` from a fresh random initialisation, then writes the zoo model and
its PyTorch references from the cldl-trained weights.

The network is train.py's (embedding 63x32 as a Gather, 2-layer LSTM 256, Linear 256->63) on the same data
(models/zoo/kjv.py: the KJV through `bible`, the last 2 % of the verses held out), initialised by PyTorch (seed
--seed) and exported time-major for training: input `x` int64 [T, N], zero initial states, output `logits`
[T, N, 63]; labels [T, N] (the next characters), `cldl train --batch-axis 1`.

Training runs in --stages calls of `cldl train` (Adam, batch --batch, one pass over --windows windows of 64
characters each, drawn afresh per stage at a random offset into the training text), the learning rate
following a cosine from --lr down to --lr / 20 over the stages (each stage starts a fresh Adam: cldl train has
no schedule of its own). After each stage the weights go back into PyTorch's CharLstm and the validation loss
is printed. Each stage's model is kept in --work (stage_K.onnx), so a cut-off run resumes where it stopped.

At the end (or with --finish after any stage), train.py's write_outputs writes model.onnx, vocab.json, the
ref_*.npy outputs and reference.json, all computed by PyTorch from the cldl-trained weights, into --out.

  python3 models/zoo/char_lstm/train_cldl.py --cldl build/cldl [--stages 12 --windows 8192]
Needs python3 with torch, numpy and onnx, and `bible` (Debian bible-kjv).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import onnx.numpy_helper
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import kjv  # noqa: E402
import train as zoo  # noqa: E402  (train.py beside this script: the network and write_outputs)


class TimeMajor(torch.nn.Module):
    """zoo.CharLstm's parameters, time-major, from zero states: x [T, N] -> logits [T, N, V]."""

    def __init__(self, vocab):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, zoo.EMBED)
        self.lstm = torch.nn.LSTM(zoo.EMBED, zoo.HIDDEN, zoo.LAYERS)
        self.head = torch.nn.Linear(zoo.HIDDEN, vocab)

    def forward(self, x):
        y, _ = self.lstm(self.embed(x))
        return self.head(y)


def to_torch(path, vocab):
    """A zoo.CharLstm holding the weights of the trained time-major ONNX file `path`."""
    g = onnx.load(path).graph
    init = {t.name: onnx.numpy_helper.to_array(t) for t in g.initializer}
    nodes = list(g.node)
    model = zoo.CharLstm(vocab)
    sd = {}
    gather = next(n for n in nodes if n.op_type == "Gather" and n.input[0] in init)
    sd["embed.weight"] = init[gather.input[0]]
    lstms = [n for n in nodes if n.op_type == "LSTM"]
    assert len(lstms) == zoo.LAYERS, f"expected {zoo.LAYERS} LSTM nodes, found {len(lstms)}"
    H = zoo.HIDDEN
    order = [0, 2, 3, 1]  # ONNX gates i, o, f, c -> PyTorch's i, f, g, o

    def gates(a):
        return np.concatenate([a[k * H:(k + 1) * H] for k in order])

    for layer, n in enumerate(lstms):
        W, R, B = (init[n.input[k]][0] for k in (1, 2, 3))
        sd[f"lstm.weight_ih_l{layer}"] = gates(W)
        sd[f"lstm.weight_hh_l{layer}"] = gates(R)
        sd[f"lstm.bias_ih_l{layer}"] = gates(B[:4 * H])
        sd[f"lstm.bias_hh_l{layer}"] = gates(B[4 * H:])
    mm = next(n for n in nodes if n.op_type in ("MatMul", "Gemm") and n.input[1] in init)
    w = init[mm.input[1]]
    sd["head.weight"] = w.T if mm.op_type == "MatMul" else w
    if mm.op_type == "Gemm":
        sd["head.bias"] = init[mm.input[2]]
    else:
        add = next(n for n in nodes if n.op_type == "Add" and mm.output[0] in n.input)
        sd["head.bias"] = init[next(i for i in add.input if i in init)]
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()})
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cldl", default=os.path.join(ROOT, "build", "cldl"))
    ap.add_argument("--stages", type=int, default=12)
    ap.add_argument("--windows", type=int, default=8192, help="windows of 64 characters per stage")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=4e-3, help="the first stage's Adam learning rate")
    ap.add_argument("--clip-norm", type=float, default=0.0, help="cldl train --clip-norm (0: no clipping)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="/tmp/char_lstm_cldl", help="stage checkpoints and data")
    ap.add_argument("--out", default=HERE, help="where the zoo model and references go")
    ap.add_argument("--finish", action="store_true", help="write the outputs from the last finished stage now")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    chars, train, val = kjv.char_split()
    vocab = len(chars)
    train = train.numpy()
    seq = zoo.SEQ

    init_path = os.path.join(args.work, "stage_0.onnx")
    if not os.path.exists(init_path):
        model = TimeMajor(vocab)
        torch.onnx.export(model, torch.zeros(seq, 2, dtype=torch.int64), init_path, input_names=["x"],
                          output_names=["logits"], dynamic_axes={"x": {1: "N"}, "logits": {1: "N"}}, opset_version=17,
                          do_constant_folding=True)
    done = 0
    while os.path.exists(os.path.join(args.work, f"stage_{done + 1}.onnx")):
        done += 1
    log_path = os.path.join(args.work, "log.json")
    log = json.load(open(log_path)) if os.path.exists(log_path) else []
    rng = np.random.default_rng(args.seed)
    offsets = rng.integers(0, seq, size=args.stages)
    for stage in range(done + 1, args.stages + 1 if not args.finish else done + 1):
        lr = args.lr / 20 + (args.lr - args.lr / 20) * 0.5 * (1 + math.cos(math.pi * (stage - 1) / max(1, args.stages - 1)))
        srng = np.random.default_rng(args.seed * 1000 + stage)
        start = int(offsets[stage - 1])
        count = (len(train) - start - 1) // seq
        pick = np.sort(srng.choice(count, size=min(args.windows, count), replace=False))
        idx = start + pick[:, None] * seq + np.arange(seq + 1)[None, :]
        w = train[idx]  # [windows, seq + 1]
        np.save(os.path.join(args.work, "x.npy"), np.ascontiguousarray(w[:, :-1].T))
        np.save(os.path.join(args.work, "y.npy"), np.ascontiguousarray(w[:, 1:].T))
        out = os.path.join(args.work, f"stage_{stage}.onnx")
        cmd = [args.cldl, "train", os.path.join(args.work, f"stage_{stage - 1}.onnx"), "--input",
               "x=" + os.path.join(args.work, "x.npy"), "--labels", os.path.join(args.work, "y.npy"), "--batch-axis",
               "1", "--batch", str(args.batch), "--optimizer", "adam", "--lr", f"{lr:.6g}", "--seed", str(stage),
               "--epochs", "1", "--json", "--out", out + ".part", "--clip-norm", str(args.clip_norm)]
        t0 = time.time()
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        os.replace(out + ".part", out)
        val_loss = zoo.validation_loss(to_torch(out, vocab), val)
        entry = {"stage": stage, "lr": lr, "windows": len(pick), "train_loss": res["epochs"][0]["loss"],
                 "val_loss": val_loss, "seconds": round(time.time() - t0, 1), "steps": res["steps"]}
        log.append(entry)
        json.dump(log, open(log_path, "w"), indent=1)
        print(json.dumps(entry), flush=True)
        done = stage
    if done == 0:
        raise SystemExit("no stage trained yet")
    model = to_torch(os.path.join(args.work, f"stage_{done}.onnx"), vocab)
    chars_seen = sum(e["windows"] for e in log[:done]) * seq
    settings = {"trained_by": "cldl train (models/zoo/char_lstm/train_cldl.py)", "stages": done,
                "windows_per_stage": args.windows, "batch": args.batch, "optimizer": "adam",
                "lr": args.lr, "lr_schedule": "cosine over stages to lr/20, a fresh Adam per stage",
                "clip_norm": args.clip_norm, "hidden": zoo.HIDDEN,
                "characters_seen": chars_seen, "seed": args.seed,
                "train_seconds": round(sum(e["seconds"] for e in log[:done]))}
    zoo.write_outputs(model, chars, val, args.out, settings)


if __name__ == "__main__":
    main()
