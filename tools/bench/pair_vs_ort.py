#!/usr/bin/env python3
"""Paired latency of one model in cldl and ONNX Runtime for a machine whose speed drifts: PAIRS pairs, each the
minimum over RUNS runs of ONNX Runtime (CPU, 2 intra-op threads, in this process) and of `cldl run MODEL --random
--bench --runs RUNS` (a process), the order flipped each pair; prints the medians and the median of the pairs'
ratios ORT / cldl (above 1: cldl is faster) with its quartiles. Both get random float inputs of the same shapes
(symbolic dims from --dim).

  tools/bench/pair_vs_ort.py models/zoo/digits_cnn/model.onnx --dim N=450 [--pairs 10] [--runs 50] [--cldl "ENV=V build/cldl"]
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_pairs import alternate, latency, ratio_stats  # noqa: E402  (the same cldl run and pairing as the A/B script)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--dim", action="append", default=[], help="NAME=VALUE for a symbolic input dimension")
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--cldl", default="build/cldl", help='"[ENV=VALUE ...] /path/to/cldl"')
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    dims = dict(d.split("=", 1) for d in args.dim)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {}
    for i in sess.get_inputs():
        shape = []
        for d in i.shape:
            if isinstance(d, int):
                shape.append(d)
            elif d in dims:
                shape.append(int(dims[d]))
            else:
                shape.append(1)  # as `cldl run --random` binds an unbound dim
        if i.type != "tensor(float)":
            raise SystemExit(f"input {i.name} is {i.type}: this script feeds float inputs only")
        feed[i.name] = rng.standard_normal(shape).astype(np.float32)

    extra = ["--runs", str(args.runs)]
    for d in args.dim:
        extra += ["--dim", d]

    def ort_min():
        for _ in range(3):
            sess.run(None, feed)
        best = float("inf")
        for _ in range(args.runs):
            t = time.perf_counter()
            sess.run(None, feed)
            best = min(best, time.perf_counter() - t)
        return best * 1e3

    o_ms, c_ms = alternate(ort_min, lambda: latency(args.cldl, args.model, extra), args.pairs)
    med, q1, q3 = ratio_stats(o_ms, c_ms)
    print(f"{os.path.basename(args.model)} {' '.join(args.dim)}: ORT {statistics.median(o_ms):.3f} ms, cldl "
          f"{statistics.median(c_ms):.3f} ms (medians of the pairs' minima over {args.runs} runs); ORT / cldl "
          f"{med:.2f}x (quartiles {q1:.2f}-{q3:.2f}, {args.pairs} pairs)")


if __name__ == "__main__":
    main()
