#!/usr/bin/env python3
"""Trains LSTM models with `cldl train` and with PyTorch from the same initial weights, data and batch order, and
compares the per-step losses, the per-epoch losses, the held-out accuracy and the time per epoch.

Models (--models):
  classifier  the zoo's 450 held-out 8x8 digits (models/zoo/digits_cnn/x_test.npy) read as sequences of 8 rows of
              8 pixels: LSTM 8->--hidden (batch_first), its last hidden state -> Linear --hidden->10; the first
              --train digits to train on, the rest held out; cross entropy over the class.
  char_lstm   the zoo's char_lstm architecture (models/zoo/char_lstm/train.py): embedding 63x32, 2-layer LSTM 128,
              Linear 128->63, next-character cross entropy on windows of --seq characters (--sequences of them to
              train on, a quarter as many held out) of --text (default: the KJV through `bible` as the zoo trains
              on when installed, else /usr/share/common-licenses/GPL-3), mapped onto the zoo's 63-character
              vocabulary. --batch-axis 0 exports it batch-major (batch_first: the input [B, T]), 1 time-major
              ([T, B]; cldl train --batch-axis 1). The embedding is exported as one-hot rows times the embedding
              matrix (a MatMul, the same numbers as nn.Embedding) unless --gather: cldl's Gather backward is not
              in this build.
Each model trains with SGD (lr --sgd-lr, momentum 0.9) and Adam (lr --adam-lr) for --epochs epochs of --batch,
freshly initialised by PyTorch (seed --seed), exported to ONNX (opset 14; LSTM W, R, B in ONNX's gate order,
zero initial states), batches in order (no shuffling) in both.

Checks (--check makes them the exit status): against PyTorch with the same math (SGD: torch.optim.SGD; Adam: a
PyTorch Adam with the ONNX Adam op's epsilon placement, tools/bench/train_vs_torch.py's OnnxAdam) every step's
loss within --step-tol (absolute) and each epoch's mean loss within 2 % (relative); held-out accuracy (of the
trained ONNX model through ONNX Runtime) within 3 points of PyTorch's. Times: the median per-epoch time over the
epochs after the first (cldl's first includes planning and kernel builds), PyTorch with
torch.set_num_threads(--threads); --rounds runs of each, alternating, all epochs' times pooled.

  CLDL_DEVICE=cpu /tmp/venv/bin/python tools/bench/train_rnn_vs_torch.py --cldl build/cldl [--models classifier]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from train_vs_torch import OnnxAdam  # noqa: E402


class Classifier(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, 10)

    def forward(self, x):
        _, (h, _) = self.lstm(x)
        return self.head(h.squeeze(0))


class CharLstm(torch.nn.Module):
    """models/zoo/char_lstm/train.py's network from zero states; one-hot input rows unless gather."""

    def __init__(self, vocab, batch_first, gather):
        super().__init__()
        self.batch_first, self.gather = batch_first, gather
        self.embed = torch.nn.Embedding(vocab, 32)
        self.lstm = torch.nn.LSTM(32, 128, 2, batch_first=batch_first)
        self.head = torch.nn.Linear(128, vocab)

    def forward(self, x):
        e = self.embed(x) if self.gather else x @ self.embed.weight
        y, _ = self.lstm(e)
        return self.head(y)


def char_data(args):
    chars = json.load(open(os.path.join(ROOT, "models", "zoo", "char_lstm", "vocab.json")))["chars"]
    if args.text:
        text = open(args.text).read()
    elif shutil.which("bible"):
        sys.path.insert(0, os.path.join(ROOT, "models", "zoo"))
        import kjv
        text = "\n".join(kjv.load_verses()) + "\n"
    else:
        text = open("/usr/share/common-licenses/GPL-3").read()
    index = {c: i for i, c in enumerate(chars)}
    ids = np.array([index[c] for c in text if c in index], dtype=np.int64)
    n_train, n_test = args.sequences, max(1, args.sequences // 4)
    need = (n_train + n_test) * args.seq + 1
    if len(ids) < need:
        ids = np.tile(ids, need // len(ids) + 1)
    windows = np.stack([ids[k * args.seq:(k + 1) * args.seq + 1] for k in range(n_train + n_test)])
    x, y = windows[:, :-1], windows[:, 1:]
    return len(chars), x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def setup(name, args):
    """(model factory, x_train, y_train, x_test, y_test, cldl input array (numpy, as exported), batch axis)."""
    if name == "classifier":
        x = np.load(os.path.join(ROOT, "models", "zoo", "digits_cnn", "x_test.npy")).astype(np.float32).reshape(-1, 8, 8)
        y = np.load(os.path.join(ROOT, "models", "zoo", "digits_cnn", "y_test.npy")).astype(np.int64)
        return (lambda: Classifier(args.hidden)), x[:args.train], y[:args.train], x[args.train:], y[args.train:], 0
    vocab, xtr, ytr, xte, yte = char_data(args)
    bf = args.batch_axis == 0
    make = lambda: CharLstm(vocab, bf, args.gather)  # noqa: E731
    if not args.gather:
        xtr, xte = (np.eye(vocab, dtype=np.float32)[v] for v in (xtr, xte))
    if not bf:  # time-major: [T, B, ...]
        xtr, ytr, xte, yte = (np.swapaxes(v, 0, 1).copy() for v in (xtr, ytr, xte, yte))
    return make, xtr, ytr, xte, yte, args.batch_axis


def rows(v, axis, i, n):
    return v[i:i + n] if axis == 0 else v[:, i:i + n]


def train_torch(model, opt_name, lr, x, y, axis, epochs, batch):
    opt = OnnxAdam(model.parameters(), lr) if opt_name == "adam_onnx" else (
        torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9) if opt_name == "sgd"
        else torch.optim.Adam(model.parameters(), lr=lr))
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    n = x.shape[axis]
    steps, epoch_loss, seconds = [], [], []
    for _ in range(epochs):
        t0 = time.perf_counter()
        total = 0.0
        for i in range(0, n, batch):
            opt.zero_grad()
            out = model(rows(xt, axis, i, batch))
            loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), rows(yt, axis, i, batch).reshape(-1))
            loss.backward()
            opt.step()
            steps.append(loss.item())
            total += loss.item() * min(batch, n - i)
        seconds.append(time.perf_counter() - t0)
        epoch_loss.append(total / n)
    return steps, epoch_loss, seconds


def accuracy(logits, y):
    return float((logits.argmax(-1) == y).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cldl", default=os.path.join(ROOT, "build", "cldl"))
    ap.add_argument("--models", nargs="+", default=["classifier", "char_lstm"], choices=["classifier", "char_lstm"])
    ap.add_argument("--optimizers", nargs="+", default=["sgd", "adam"])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=64, help="classifier: LSTM hidden size")
    ap.add_argument("--train", type=int, default=300, help="classifier: digits trained on (the rest held out)")
    ap.add_argument("--sequences", type=int, default=128, help="char_lstm: training windows")
    ap.add_argument("--seq", type=int, default=64, help="char_lstm: window length")
    ap.add_argument("--text", help="char_lstm: a text file to train on")
    ap.add_argument("--batch-axis", type=int, default=0, choices=[0, 1], help="char_lstm: 0 batch-major, 1 time-major")
    ap.add_argument("--gather", action="store_true", help="char_lstm: export nn.Embedding as Gather")
    ap.add_argument("--sgd-lr", type=float, default=0.1)
    ap.add_argument("--adam-lr", type=float, default=5e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="PyTorch threads")
    ap.add_argument("--step-tol", type=float, default=1e-4)
    ap.add_argument("--rounds", type=int, default=1,
                    help="timing: both trainings run this many times, alternating; medians reported")
    ap.add_argument("--check", action="store_true", help="exit 1 when a check fails")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ok, report = True, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            make, xtr, ytr, xte, yte, axis = setup(name, args)
            torch.manual_seed(args.seed)
            init = make()
            model_path = os.path.join(tmp, f"{name}.onnx")
            sample = torch.from_numpy(rows(xtr, axis, 0, 1))
            dyn = {"x": {axis: "N"}, "logits": {axis: "N"}}
            torch.onnx.export(init, sample, model_path, input_names=["x"], output_names=["logits"], dynamic_axes=dyn,
                              opset_version=14)
            np.save(os.path.join(tmp, "x.npy"), xtr)
            np.save(os.path.join(tmp, "y.npy"), ytr)
            for opt_name in args.optimizers:
                lr = args.sgd_lr if opt_name == "sgd" else args.adam_lr
                model = make()
                model.load_state_dict(init.state_dict())
                t_steps, t_epochs, t_sec = train_torch(model, opt_name, lr, xtr, ytr, axis, args.epochs, args.batch)
                model.eval()
                with torch.no_grad():
                    t_acc = accuracy(model(torch.from_numpy(xte)).numpy(), yte)
                out = os.path.join(tmp, f"trained_{name}_{opt_name}.onnx")
                cmd = [args.cldl, "train", model_path, "--input", "x=" + os.path.join(tmp, "x.npy"), "--labels",
                       os.path.join(tmp, "y.npy"), "--loss", "cross_entropy", "--epochs", str(args.epochs), "--batch",
                       str(args.batch), "--batch-axis", str(axis), "--optimizer", opt_name, "--lr", str(lr),
                       "--momentum", "0.9", "--no-shuffle", "--out", out, "--json"]
                res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
                for _ in range(args.rounds - 1):  # alternating PyTorch and cldl (the machine is shared and noisy)
                    again = make()
                    again.load_state_dict(init.state_dict())
                    t_sec += train_torch(again, opt_name, lr, xtr, ytr, axis, args.epochs, args.batch)[2][1:]
                    more = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
                    res.setdefault("more_seconds", []).extend(e["seconds"] for e in more["epochs"][1:])
                c_steps = [s for e in res["epochs"] for s in e["step_losses"]]
                c_epochs = [e["loss"] for e in res["epochs"]]
                c_sec = [e["seconds"] for e in res["epochs"]]
                sess = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
                c_acc = accuracy(sess.run(None, {"x": xte})[0], yte)
                if opt_name == "adam":  # per step against the same math: PyTorch with the ONNX Adam's epsilon
                    same = make()
                    same.load_state_dict(init.state_dict())
                    ref_steps, ref_epochs, _ = train_torch(same, "adam_onnx", lr, xtr, ytr, axis, args.epochs, args.batch)
                else:
                    ref_steps, ref_epochs = t_steps, t_epochs
                step_diff = float(np.max(np.abs(np.array(c_steps) - np.array(ref_steps))))
                epoch_rel = float(np.max(np.abs(np.array(c_epochs) - np.array(ref_epochs)) / np.array(ref_epochs)))
                t_epoch_s = float(np.median(t_sec[1:] if len(t_sec) > 1 else t_sec))
                c_epoch_s = float(np.median((c_sec[1:] if len(c_sec) > 1 else c_sec) + res.get("more_seconds", [])))
                checks = {"steps": step_diff <= args.step_tol, "epochs": epoch_rel <= 0.02,
                          "accuracy": abs(c_acc - t_acc) <= 0.03}
                ok = ok and all(checks.values())
                key = f"{name}/{opt_name}"
                report[key] = {"torch_epoch_loss": t_epochs, "cldl_epoch_loss": c_epochs, "max_step_loss_diff": step_diff,
                               "max_epoch_loss_rel_diff": epoch_rel, "torch_accuracy": t_acc, "cldl_accuracy": c_acc,
                               "torch_s_per_epoch": t_epoch_s, "cldl_s_per_epoch": c_epoch_s,
                               "cldl_first_epoch_s": c_sec[0], "time_ratio_cldl_over_torch": c_epoch_s / t_epoch_s,
                               "checks": checks}
                print(f"{key}: epoch loss torch {' '.join(f'{v:.4f}' for v in t_epochs)}")
                print(f"{key}: epoch loss cldl  {' '.join(f'{v:.4f}' for v in c_epochs)}")
                print(f"{key}: max |step loss diff| {step_diff:.2e} (tol {args.step_tol}), max epoch rel diff "
                      f"{epoch_rel:.2e}; held-out accuracy torch {t_acc:.4f} cldl {c_acc:.4f}; s/epoch torch "
                      f"{t_epoch_s:.4f} cldl {c_epoch_s:.4f} ({c_epoch_s / t_epoch_s:.2f}x; cldl's first epoch "
                      f"{c_sec[0]:.2f} s); {'ok' if all(checks.values()) else 'FAILED ' + str(checks)}", flush=True)
    print(json.dumps(report))
    if args.check and not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
