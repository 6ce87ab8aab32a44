#!/usr/bin/env python3
"""ONNX Runtime peer for tiny_gpt generation: the same model.onnx, the same protocol as `cldl generate`
(one prefill call with the prompt at pos 0, then one call per new token with T=1, the K/V cache outputs
fed back as the next call's inputs), greedy. Prints the text and ms/token of the decode steps.

Run with the pyenv python3 that has onnxruntime:
  python3 models/zoo/tiny_gpt/peer_onnxruntime.py [--prompt "And God said"] [--tokens 100] [--runs 5] [--threads 1]
--check compares the greedy tokens with reference.json (PyTorch's full recompute).
"""
import argparse
import json
import os
import time

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(HERE, "model.onnx"))
    ap.add_argument("--prompt", default=None, help="default: reference.json's prompt")
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--runs", type=int, default=5, help="generations; ms/token is the median over them")
    ap.add_argument("--threads", type=int, default=1, help="ORT intra-op threads")
    ap.add_argument("--check", action="store_true", help="tokens must equal reference.json's greedy_tokens")
    args = ap.parse_args()

    with open(os.path.join(os.path.dirname(args.model), "vocab.json")) as f:
        chars = json.load(f)["chars"]
    with open(os.path.join(os.path.dirname(args.model), "reference.json")) as f:
        ref = json.load(f)
    prompt = args.prompt if args.prompt is not None else ref["prompt"]
    index = {c: i for i, c in enumerate(chars)}

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
    meta = sess.get_modelmeta().custom_metadata_map
    max_pos = int(meta["max_positions"])
    if len(prompt) + args.tokens > max_pos:
        raise SystemExit(f"prompt + tokens = {len(prompt) + args.tokens} exceeds max_positions {max_pos}")
    states = [i for i in sess.get_inputs() if i.name.endswith("_in")]

    def generate():
        feed = {s.name: np.zeros([1] + s.shape[1:], np.float32) for s in states}
        feed["tokens"] = np.array([[index[c] for c in prompt]], np.int64)
        feed["pos"] = np.array([0], np.int64)
        out, step_s = [], []
        pos = len(prompt)
        for n in range(args.tokens):
            t0 = time.perf_counter()
            res = sess.run(None, feed)
            nxt = int(res[0][0, -1].argmax())
            if n:
                step_s.append(time.perf_counter() - t0)
            out.append(nxt)
            feed = {s.name: r for s, r in zip(states, res[1:])}
            feed["tokens"] = np.array([[nxt]], np.int64)
            feed["pos"] = np.array([pos], np.int64)
            pos += 1
        return out, step_s

    ms = []
    for _ in range(args.runs):
        out, step_s = generate()
        ms.append(1e3 * sum(step_s) / len(step_s))
    print(f"{prompt}{''.join(chars[t] for t in out)}")
    print(f"onnxruntime {ort.__version__}, {args.threads} thread(s): {args.tokens} tokens, decode "
          f"{np.median(ms):.3f} ms/token (median of {args.runs} runs, min {min(ms):.3f})")
    if args.check:
        if prompt != ref["prompt"] or out != ref["greedy_tokens"][:args.tokens]:
            raise SystemExit("greedy tokens differ from reference.json")
        print("greedy tokens equal PyTorch's (reference.json)")


if __name__ == "__main__":
    main()
