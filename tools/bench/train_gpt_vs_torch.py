#!/usr/bin/env python3
"""Trains the zoo's tiny_gpt architecture (models/zoo/tiny_gpt/train.py: token + learned position embeddings, 2
pre-norm blocks of causal self-attention with 4 heads and a Gelu MLP, final LayerNorm, Linear head) with
`cldl train` and with PyTorch from the same initial weights, data and batch order, and compares the per-step
losses and the time per step.

The training export is models/zoo/tiny_gpt/train_cldl.py's (training_export): full sequences of --seq tokens (no KV
cache), tokens int64 [B, T] -> logits [B, T, V], each block's attention one ONNX Attention node (3-D Q/K/V, 4 heads,
is_causal 1, opset 23), the QKV projection split by Slice, every Linear a Gemm on [B*T, 128] rows; cldl
differentiates the attention through its Attention rule (AttentionTrain + AttentionGrad, flash-style).
Data: windows of --seq + 1 characters of --text (default: the KJV through `bible` when installed, else
/usr/share/common-licenses/GPL-3) mapped onto the zoo's 63-character vocabulary; next-character cross entropy
(the mean over B x T). Optimizer: AdamW lr --lr, weight decay --weight-decay, as cldl's (the ONNX Adam epsilon
placement: tools/bench/train_vs_torch.py's OnnxAdam with decoupled decay), no clipping, no schedule, batches in
order (--no-shuffle) for --epochs epochs of --sequences windows.

Check (--check makes it the exit status): every step's loss within --step-tol (absolute) of PyTorch's. Times: the
median seconds per step over the epochs after the first (cldl's first includes planning and kernel builds), PyTorch
with torch.set_num_threads(--threads); --rounds runs of each, alternating.

  CLDL_DEVICE=cpu /tmp/venv/bin/python tools/bench/train_gpt_vs_torch.py --cldl build/cldl
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "models", "zoo", "tiny_gpt"))
from train_vs_torch import OnnxAdam  # noqa: E402
from train_rnn_vs_torch import char_data  # noqa: E402
import train as gpt  # noqa: E402  (the zoo's recipe: TinyGpt and its sizes)
from train_cldl import TrainGpt, training_export  # noqa: E402  (the training export)


def data(args):
    """(vocabulary size, x, y): train_rnn_vs_torch's char_lstm windows (the zoo's char_lstm and tiny_gpt share the
    63-character vocabulary), its training part."""
    vocab, x, y, _, _ = char_data(args)
    return vocab, x, y


def train_torch(model, args, x, y):
    opt = OnnxAdam(model.parameters(), args.lr, decoupled=args.weight_decay)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    steps, seconds = [], []
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        n = 0
        for i in range(0, len(xt), args.batch):
            opt.zero_grad()
            out = model(xt[i:i + args.batch])
            loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), yt[i:i + args.batch].reshape(-1))
            loss.backward()
            opt.step()
            steps.append(loss.item())
            n += 1
        seconds.append((time.perf_counter() - t0) / n)
    return steps, seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cldl", default=os.path.join(ROOT, "build", "cldl"))
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--sequences", type=int, default=256, help="training windows")
    ap.add_argument("--seq", type=int, default=64, help="window length (<= 128, the model's positions)")
    ap.add_argument("--text", help="a text file to train on")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="PyTorch threads")
    ap.add_argument("--step-tol", type=float, default=2e-3)
    ap.add_argument("--rounds", type=int, default=1, help="timing: both trainings this many times, alternating")
    ap.add_argument("--check", action="store_true", help="exit 1 when the check fails")
    ap.add_argument("--keep", help="a folder to keep the exported and the trained model in")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    vocab, x, y = data(args)
    torch.manual_seed(args.seed)
    init = gpt.TinyGpt(vocab)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or tmp
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "tiny_gpt_train.onnx")
        training_export(init, args.seq, path)
        np.save(os.path.join(folder, "x.npy"), x)
        np.save(os.path.join(folder, "y.npy"), y)
        out = os.path.join(folder, "tiny_gpt_trained.onnx")
        cmd = [args.cldl, "train", path, "--input", "tokens=" + os.path.join(folder, "x.npy"), "--labels",
               os.path.join(folder, "y.npy"), "--loss", "cross_entropy", "--epochs", str(args.epochs), "--batch",
               str(args.batch), "--optimizer", "adamw", "--lr", str(args.lr), "--weight-decay", str(args.weight_decay),
               "--no-shuffle", "--out", out, "--json"]
        t_sec, c_sec = [], []
        for r in range(args.rounds):
            model = gpt.TinyGpt(vocab)
            model.load_state_dict(init.state_dict())
            t_steps, sec = train_torch(TrainGpt(model, False), args, x, y)
            t_sec += sec[1:] if len(sec) > 1 else sec
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            per_step = [e["seconds"] / len(e["step_losses"]) for e in res["epochs"]]
            c_sec += per_step[1:] if len(per_step) > 1 else per_step
            if r == 0:
                c_first = per_step[0]
                c_steps = [s for e in res["epochs"] for s in e["step_losses"]]
    diff = np.abs(np.array(c_steps) - np.array(t_steps))
    t_step, c_step = float(np.median(t_sec)), float(np.median(c_sec))
    ok = bool(diff.max() <= args.step_tol)
    report = {"steps": len(c_steps), "torch_first_loss": t_steps[0], "torch_last_loss": t_steps[-1],
              "cldl_last_loss": c_steps[-1], "max_step_loss_diff": float(diff.max()),
              "mean_step_loss_diff": float(diff.mean()), "torch_s_per_step": t_step, "cldl_s_per_step": c_step,
              "cldl_first_epoch_s_per_step": c_first, "time_ratio_cldl_over_torch": c_step / t_step, "ok": ok}
    every = max(1, len(c_steps) // 8)
    for i in sorted(set(range(0, len(c_steps), every)) | {len(c_steps) - 1}):
        print(f"step {i + 1:4d}: loss torch {t_steps[i]:.5f} cldl {c_steps[i]:.5f} (diff {c_steps[i] - t_steps[i]:+.2e})")
    print(f"{len(c_steps)} steps: max |step loss diff| {diff.max():.2e} (tol {args.step_tol}); s/step torch {t_step:.4f} "
          f"cldl {c_step:.4f} ({c_step / t_step:.2f}x; cldl's first epoch {c_first:.3f} s/step); "
          f"{'ok' if ok else 'FAILED'}", flush=True)
    print(json.dumps(report))
    if args.check and not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
