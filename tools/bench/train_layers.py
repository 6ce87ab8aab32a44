#!/usr/bin/env python3
"""Layer-parallel training of an LSTM stack (`cldl train --parallel layers`, docs/training.md): time per epoch
against one device and data parallel, and the schedule of one training step on two devices.

The model: x [T, N, I] -> L LSTM layers of H units (each Y squeezed, as torch.onnx exports nn.LSTM(num_layers=L))
-> MatMul H x C + bias: logits [T, N, C], cross entropy per step, random weights (uniform +-0.1, seed 0) and data;
trained along --batch-axis 1. Two PoCL devices come from POCL_DEVICES="pthread pthread" (set here): `cpu:0` is one
of them, `cpu:0,cpu:1` both. Every configuration runs in turn (A B C A B C ...) for --rounds rounds; per
configuration the median of the per-epoch times over the epochs after the first of every round, its ratio to the
first configuration, and the last loss (layer parallel trains the one-device curve up to rounding).

--trace: the layer-parallel training graph (CLDL_TRAIN_GRAPH) profiled on the two devices (`cldl profile --trace`,
minimum of 3 runs): each device's busy time, the time both are busy, and per layer the span of its forward and
backward chunks, so the wavefronts show: layer l + 1's forward chunk c beside layer l's chunk c + 1, and in the
backward layer l's chunk c beside layer l + 1's chunk c - 1.

  /tmp/venv/bin/python tools/bench/train_layers.py --cldl build/cldl --epochs 4 --rounds 3 --trace
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(path, T, I, H, C, L):
    rng = np.random.default_rng(0)
    nodes, inits = [], [numpy_helper.from_array(np.array([1], np.int64), "axes1")]
    x = "x"
    for l in range(L):
        i = I if l == 0 else H
        for name, shape in (("W", (1, 4 * H, i)), ("R", (1, 4 * H, H)), ("B", (1, 8 * H))):
            inits.append(numpy_helper.from_array(rng.uniform(-.1, .1, shape).astype(np.float32), f"rnn{l}.{name}"))
        nodes.append(helper.make_node("LSTM", [x, f"rnn{l}.W", f"rnn{l}.R", f"rnn{l}.B"], [f"rnn{l}.Y"],
                                      name=f"rnn{l}", hidden_size=H))
        nodes.append(helper.make_node("Squeeze", [f"rnn{l}.Y", "axes1"], [f"rnn{l}.out"], name=f"squeeze{l}"))
        x = f"rnn{l}.out"
    inits.append(numpy_helper.from_array(rng.uniform(-.1, .1, (H, C)).astype(np.float32), "fc.W"))
    inits.append(numpy_helper.from_array(np.zeros(C, np.float32), "fc.B"))
    nodes.append(helper.make_node("MatMul", [x, "fc.W"], ["fc.mm"], name="fc"))
    nodes.append(helper.make_node("Add", ["fc.mm", "fc.B"], ["logits"], name="fc_bias"))
    g = helper.make_graph(nodes, "lstm_stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, "N", I])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [T, "N", C])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def trace_summary(path):
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]

    def merged(tid):
        out = []
        for a, b in sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["tid"] == tid):
            if out and a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        return out

    m0, m1 = merged(0), merged(1)
    both = sum(max(0, min(b, d) - max(a, c)) for a, b in m0 for c, d in m1)
    t0 = min(x[0] for x in m0 + m1)
    span = max(x[1] for x in m0 + m1) - t0
    print(f"one step: {span / 1e3:.1f} ms; device 0 busy {sum(b - a for a, b in m0) / 1e3:.1f} ms, device 1 "
          f"{sum(b - a for a, b in m1) / 1e3:.1f} ms, both at once {both / 1e3:.1f} ms")
    # Forward chunks are named rnnL/tC...; a backward chunk is RNNGrad__K/tC (K per layer, in the order seen).
    spans, grads = {}, {}
    for e in ev:
        if "migrate" in e["name"]:  # a chunk's output moved to the other device (named by the value)
            continue
        m = re.search(r"(?:^|/)(rnn\d+)/t(\d+)__", e["name"]) or re.search(r"(RNNGrad__\d+)/t(\d+)__", e["name"])
        if not m:
            continue
        key = (e["tid"], m.group(1), int(m.group(2)))
        a, b = spans.get(key, (e["ts"], e["ts"] + e["dur"]))
        spans[key] = (min(a, e["ts"]), max(b, e["ts"] + e["dur"]))
    for (tid, name, c), (a, b) in sorted(spans.items(), key=lambda kv: kv[1][0]):
        what = f"{name} forward" if name.startswith("rnn") else f"backward {grads.setdefault(name, len(grads))}"
        print(f"  device {tid}  {what:16s} chunk {c:2d}  {(a - t0) / 1e3:7.2f} - {(b - t0) / 1e3:7.2f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cldl", default="build/cldl")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--input", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--classes", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time-chunks", type=int, default=0, help="0: cldl's default")
    ap.add_argument("--trace", action="store_true")
    args = ap.parse_args()
    env = dict(os.environ, POCL_DEVICES="pthread pthread")
    env.pop("CLDL_DEVICE", None)
    chunks = ["--time-chunks", str(args.time_chunks)] if args.time_chunks else []
    configs = [("one device", ["-d", "cpu:0"]),
               ("layer parallel, 2 devices", ["-d", "cpu:0,cpu:1", "--parallel", "layers"] + chunks),
               ("data parallel, 2 devices", ["-d", "cpu:0,cpu:1"])]
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "stack.onnx")
        make_model(model, args.steps, args.input, args.hidden, args.classes, args.layers)
        rng = np.random.default_rng(1)
        np.save(os.path.join(tmp, "x.npy"), rng.uniform(-1, 1, (args.steps, args.samples, args.input)).astype(np.float32))
        np.save(os.path.join(tmp, "y.npy"), rng.integers(0, args.classes, (args.steps, args.samples)).astype(np.int64))
        base = [args.cldl, "train", model, "-i", "x=" + os.path.join(tmp, "x.npy"), "-l", os.path.join(tmp, "y.npy"),
                "--batch-axis", "1", "--batch", str(args.batch), "--no-shuffle", "--out",
                os.path.join(tmp, "trained.onnx")]
        times = {label: [] for label, _ in configs}
        last = {}
        for _ in range(args.rounds):
            for label, extra in configs:
                r = subprocess.run(base + ["--epochs", str(args.epochs), "--json"] + extra, env=env,
                                   capture_output=True, text=True)
                if r.returncode:
                    sys.exit(f"{label}: {' '.join(r.args)}\n{r.stdout}{r.stderr}")
                out = json.loads(r.stdout[r.stdout.index("{"):])
                times[label] += [e["seconds"] for e in out["epochs"][1:]]
                last[label] = out["epochs"][-1]["loss"]
        ref = statistics.median(times[configs[0][0]])
        print(f"LSTM x{args.layers}, T {args.steps}, I {args.input}, H {args.hidden}, batch {args.batch}, "
              f"{args.samples} samples: seconds per epoch (median of {len(times[configs[0][0]])} epochs)")
        for label, _ in configs:
            t = statistics.median(times[label])
            print(f"  {label:28s} {t:7.3f} s  {t / ref:5.2f}x  last loss {last[label]:.6f}")
        if args.trace:
            graph = os.path.join(tmp, "train_graph.onnx")
            r = subprocess.run(base + ["--epochs", "1"] + configs[1][1],
                               env=dict(env, CLDL_TRAIN_GRAPH=graph), capture_output=True, text=True)
            if r.returncode:
                sys.exit(r.stdout + r.stderr)
            trace = os.path.join(tmp, "trace.json")
            r = subprocess.run([args.cldl, "profile", graph, "--random", "-d", "cpu:0,cpu:1", "--dim",
                                f"N={args.batch}", "--runs", "3", "--trace", trace, "--top", "0"],
                               env=env, capture_output=True, text=True)
            if r.returncode:
                sys.exit(r.stdout + r.stderr)
            trace_summary(trace)


if __name__ == "__main__":
    main()
