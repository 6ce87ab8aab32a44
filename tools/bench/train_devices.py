#!/usr/bin/env python3
"""Time per epoch of `cldl train` on the digits CNN (tools/bench/train_vs_torch.py's network and data: 300 of the
zoo's held-out digits, batch 32, SGD lr 0.05 momentum 0.9, no shuffling) for several configurations, each a cldl
binary and a device spec, run in turn (A B A B ...) for --rounds rounds; per configuration the median of the
per-epoch times over the epochs after the first of every round (the first adds planning and kernel builds), its
ratio to the first configuration, and the final epoch's loss (equal configurations train the same curve).

Two PoCL devices come from POCL_DEVICES="pthread pthread" (set here for every run, so `cpu:0` is one of them and
`cpu:0,cpu:1` both). On a machine with few cores both devices share them: the two-device figure then measures
the overhead of data parallelism (two gradient graphs, the gradient sums, two updates), not a speed-up.

  CLDL_CACHE_DIR=... /tmp/venv/bin/python tools/bench/train_devices.py --epochs 6 --rounds 3 \\
      one=build/cldl:cpu:0 two=build/cldl:cpu:0,cpu:1 [base=/path/to/old/cldl:cpu:0]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_vs_torch import ZOO, DigitsCnn  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="+", help="LABEL=CLDL_BINARY:DEVICE_SPEC")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--train", type=int, default=300)
    args = ap.parse_args()
    configs = []
    for c in args.configs:
        label, rest = c.split("=", 1)
        binary, spec = rest.split(":", 1)
        configs.append((label, binary, spec))
    x = np.load(os.path.join(ZOO, "x_test.npy")).astype(np.float32)[:args.train]
    y = np.load(os.path.join(ZOO, "y_test.npy")).astype(np.int64)[:args.train]
    env = dict(os.environ, POCL_DEVICES="pthread pthread")
    env.pop("CLDL_DEVICE", None)
    times = {label: [] for label, _, _ in configs}
    losses = {}
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        model = os.path.join(tmp, "digits_cnn_init.onnx")
        torch.onnx.export(DigitsCnn(), torch.from_numpy(x[:1]), model, input_names=["image"],
                          output_names=["logits"], dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}},
                          opset_version=17)
        np.save(os.path.join(tmp, "x.npy"), x)
        np.save(os.path.join(tmp, "y.npy"), y)
        for _ in range(args.rounds):
            for label, binary, spec in configs:
                cmd = [binary, "train", model, "--input", "image=" + os.path.join(tmp, "x.npy"), "--labels",
                       os.path.join(tmp, "y.npy"), "--epochs", str(args.epochs), "--batch", str(args.batch), "--lr",
                       "0.05", "--momentum", "0.9", "--no-shuffle", "-d", spec, "--out",
                       os.path.join(tmp, "out.onnx"), "--json"]
                r = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit("{} failed: {}".format(" ".join(cmd), r.stderr[-2000:]))
                res = json.loads(r.stdout[r.stdout.index("{"):])
                times[label] += [e["seconds"] for e in res["epochs"][1:]]
                losses[label] = res["epochs"][-1]["loss"]
    first = statistics.median(times[configs[0][0]])
    print("{:<10} {:<28} {:>10} {:>8} {:>12}".format("config", "devices", "s/epoch", "ratio", "last loss"))
    for label, _, spec in configs:
        med = statistics.median(times[label])
        print("{:<10} {:<28} {:>10.4f} {:>8.2f} {:>12.6f}".format(label, spec, med, med / first, losses[label]))
    print(json.dumps({label: {"median_s": statistics.median(t), "epochs": len(t), "last_loss": losses[label]}
                      for label, t in times.items()}))


if __name__ == "__main__":
    main()
