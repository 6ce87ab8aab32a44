#!/usr/bin/env python3
"""ONNX Runtime peer for `cldl bench zoo`: the same zoo models and cases on ORT's CPU provider (default
threads). digits_cnn: one call over the first B test images; char_lstm: greedy generation of 64 tokens
from "And God said" (the prompt in one call, then T = 1 calls carrying h/c), as cldl's Generator does;
tiny_gpt the same way, carrying its K/V caches.
Prints one JSON object per case: {"case", "min_ms", "median_ms", "max_ms", "runs", "note"}."""
import argparse
import json
import os
import time

import numpy as np
import onnxruntime as ort


def timed(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    ms = []
    for _ in range(max(1, runs)):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    return {"min_ms": ms[0], "median_ms": float(np.median(ms)), "max_ms": ms[-1], "runs": len(ms)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zoo", default="models/zoo")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    cnn = ort.InferenceSession(os.path.join(args.zoo, "digits_cnn", "model.onnx"), providers=["CPUExecutionProvider"])
    x = np.load(os.path.join(args.zoo, "digits_cnn", "x_test.npy"))
    for b in (1, len(x)):
        part = x[:b]
        r = timed(lambda: cnn.run(None, {"image": part}), args.runs, args.warmup)
        r.update(case=f"digits_cnn batch {b}", note=f"{r['median_ms'] / b:.4f} ms/image, onnxruntime {ort.__version__}")
        print(json.dumps(r), flush=True)

    lstm = ort.InferenceSession(os.path.join(args.zoo, "char_lstm", "model.onnx"), providers=["CPUExecutionProvider"])
    chars = json.load(open(os.path.join(args.zoo, "char_lstm", "vocab.json")))["chars"]
    index = {c: i for i, c in enumerate(chars)}
    prompt = np.array([[index[c] for c in "And God said"]], np.int64)
    tokens = 64

    state = [d if isinstance(d, int) else 1 for d in lstm.get_inputs()[1].shape]  # h_in: [layers, B, hidden]

    def generate():
        h = np.zeros(state, np.float32)
        c = np.zeros(state, np.float32)
        logits, h, c = lstm.run(None, {"tokens": prompt, "h_in": h, "c_in": c})
        out = [int(logits[0, -1].argmax())]
        while len(out) < tokens:
            logits, h, c = lstm.run(None, {"tokens": np.array([[out[-1]]], np.int64), "h_in": h, "c_in": c})
            out.append(int(logits[0, -1].argmax()))
        return out

    r = timed(generate, max(1, args.runs // 5), 1)
    r.update(case=f"char_lstm {tokens} tokens", note=f"{r['median_ms'] / tokens:.3f} ms/token, onnxruntime {ort.__version__}")
    print(json.dumps(r), flush=True)

    # tiny_gpt: the same protocol (prompt at pos 0 in one call, then T = 1 calls feeding each <s>_out back
    # as <s>_in, the K/V caches), 64 greedy tokens from the same prompt.
    gpt_path = os.path.join(args.zoo, "tiny_gpt", "model.onnx")
    if not os.path.exists(gpt_path):
        return
    gpt = ort.InferenceSession(gpt_path, providers=["CPUExecutionProvider"])
    gchars = json.load(open(os.path.join(args.zoo, "tiny_gpt", "vocab.json")))["chars"]
    gindex = {c: i for i, c in enumerate(gchars)}
    gprompt = [gindex[c] for c in "And God said"]
    states = [i for i in gpt.get_inputs() if i.name.endswith("_in")]
    out_names = [o.name for o in gpt.get_outputs()]

    def generate_gpt():
        feed = {s.name: np.zeros([1] + s.shape[1:], np.float32) for s in states}
        feed["tokens"] = np.array([gprompt], np.int64)
        feed["pos"] = np.array([0], np.int64)
        out, pos = [], len(gprompt)
        while len(out) < tokens:
            res = dict(zip(out_names, gpt.run(None, feed)))
            out.append(int(res["logits"][0, -1].argmax()))
            feed = {s.name: res[s.name[:-3] + "_out"] for s in states}
            feed["tokens"] = np.array([[out[-1]]], np.int64)
            feed["pos"] = np.array([pos], np.int64)
            pos += 1
        return out

    r = timed(generate_gpt, max(1, args.runs // 5), 1)
    r.update(case=f"tiny_gpt {tokens} tokens", note=f"{r['median_ms'] / tokens:.3f} ms/token, onnxruntime {ort.__version__}")
    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
