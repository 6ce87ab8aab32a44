#!/usr/bin/python3
"""ONNX Runtime (CPU) as the peer of `cldl bench MODEL.onnx --compare`: one session of MODEL on the input
files cldl runs (--input NAME=FILE.npy), --threads intra-op threads, served as the case "model"
(tools/bench/peer_serve.py): `run model` answers one timed run. Needs onnxruntime and numpy (PyPI).

    tools/bench/model_onnxruntime.py MODEL.onnx --input x=X.npy [--threads 2] [--warmup 3] --serve"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_serve import serve_loop  # noqa: E402  tools/bench/, next to this script


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--input", action="append", default=[])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--serve", action="store_true")
    a = ap.parse_args()
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    feeds = {}
    for spec in a.input:
        name, path = spec.split("=", 1)
        feeds[name] = np.load(path)
    for _ in range(max(a.warmup, 1)):
        sess.run(None, feeds)
    note = f"onnxruntime {ort.__version__} CPU, {a.threads} intra-op threads"
    serve_loop({"model": (sess, feeds)}, {"model": os.path.basename(a.model)}, {"model": note})


if __name__ == "__main__":
    main()
