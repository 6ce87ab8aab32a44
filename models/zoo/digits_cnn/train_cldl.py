#!/usr/bin/env python3
"""Trains the zoo's digits CNN with `cldl train` from a fresh random initialisation, then writes the zoo model and
its PyTorch references from the cldl-trained weights.

The network and data are train.py's (sklearn's digits, the same stratified split), initialised by PyTorch (seed
--seed) and exported with its BatchNormalization nodes (tools/bench/train_vs_torch.py's export_inference);
`cldl train` trains it (Adam, lr --lr, batch 32, --epochs epochs, shuffled with --seed) in training mode,
BatchNorm's running statistics included. The trained weights and running statistics go back into PyTorch's
DigitsCnn by name; train.py's write_outputs writes x_test.npy, y_test.npy, ref_logits.npy (PyTorch's logits
from the cldl-trained weights, eval mode), model.onnx and reference.json into --out.

  python3 models/zoo/digits_cnn/train_cldl.py --cldl build/cldl
Needs python3 with torch, numpy, onnx and sklearn.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnx.numpy_helper
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
import train as zoo  # noqa: E402  (train.py beside this script: the network, the data, write_outputs)
from train_vs_torch import export_inference  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cldl", default=os.path.join(ROOT, "build", "cldl"))
    ap.add_argument("--epochs", type=int, default=zoo.EPOCHS)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=zoo.SEED)
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    x_train, x_test, y_train, y_test = zoo.data()
    model = zoo.DigitsCnn()
    with tempfile.TemporaryDirectory() as tmp:
        init, trained = os.path.join(tmp, "init.onnx"), os.path.join(tmp, "trained.onnx")
        export_inference(model, torch.from_numpy(x_train[:2]), init)
        np.save(os.path.join(tmp, "x.npy"), x_train)
        np.save(os.path.join(tmp, "y.npy"), y_train)
        cmd = [args.cldl, "train", init, "--input", "image=" + os.path.join(tmp, "x.npy"), "--labels",
               os.path.join(tmp, "y.npy"), "--optimizer", "adam", "--lr", str(args.lr), "--batch", "32", "--epochs",
               str(args.epochs), "--seed", str(args.seed), "--json", "--out", trained]
        t0 = time.time()
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        train_s = time.time() - t0
        for e in res["epochs"]:
            print(f"epoch {e['epoch']}: train loss {e['loss']:.4f}")
        weights = {t.name: torch.from_numpy(onnx.numpy_helper.to_array(t).copy())
                   for t in onnx.load(trained).graph.initializer}
    state = model.state_dict()
    missing = [k for k in state if k not in weights and not k.endswith("num_batches_tracked")]
    if missing:
        raise SystemExit(f"the trained model lacks {missing}")
    model.load_state_dict({k: weights.get(k, v) for k, v in state.items()})
    zoo.write_outputs(model, x_test, y_test, {"trained_by": "cldl train (models/zoo/digits_cnn/train_cldl.py)",
                                              "optimizer": "adam", "lr": args.lr, "batch": 32,
                                              "epochs": args.epochs, "seed": args.seed,
                                              "train_seconds": round(train_s, 1)}, args.out)


if __name__ == "__main__":
    main()
