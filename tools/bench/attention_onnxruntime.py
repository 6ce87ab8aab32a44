#!/usr/bin/env python3
"""ONNX Runtime peer for `cldl bench attention`: times the CPU Attention op (opset 23) or, when this
onnxruntime lacks it, the equivalent MatMul-Softmax-MatMul graph, on the cases given as BxSxHxDxCAUSAL.
Prints one JSON object per case: {"case", "min_ms", "median_ms", "max_ms", "runs", "note"}.

--serve (what `cldl bench attention` uses): builds every case's session and does the warm-ups, prints
{"ready": true, "cases": ["BxSxHxDxCAUSAL", ...], "names": {case: name}, "notes": {case: note}}, then reads stdin lines:
`run BxSxHxDxCAUSAL` runs that case once and prints {"case": ..., "ms": wall ms, "cpu_ms": process cpu ms};
`quit` or EOF ends it, so cldl times the peer round by round between its own runs. ONNX Runtime keeps its
defaults, intra-op spinning included: its idle threads spin for up to ~40 ms after a run, so cldl pauses
before timing its own next run."""
import argparse
import json
import time

import numpy as np
import onnx
from onnx import TensorProto, helper
import onnxruntime as ort

from peer_serve import serve_loop  # tools/bench/, next to this script


def attention_model(b, s, h, d, causal):
    q = helper.make_tensor_value_info("Q", TensorProto.FLOAT, [b, h, s, d])
    k = helper.make_tensor_value_info("K", TensorProto.FLOAT, [b, h, s, d])
    v = helper.make_tensor_value_info("V", TensorProto.FLOAT, [b, h, s, d])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [b, h, s, d])
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], is_causal=int(causal))
    g = helper.make_graph([node], "attn", [q, k, v], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


def matmul_softmax_model(b, s, h, d, causal):
    q = helper.make_tensor_value_info("Q", TensorProto.FLOAT, [b, h, s, d])
    k = helper.make_tensor_value_info("K", TensorProto.FLOAT, [b, h, s, d])
    v = helper.make_tensor_value_info("V", TensorProto.FLOAT, [b, h, s, d])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [b, h, s, d])
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [], [1.0 / np.sqrt(d)])
    mask = np.triu(np.full((s, s), -np.inf, dtype=np.float32), 1) if causal else np.zeros((s, s), np.float32)
    mask_t = helper.make_tensor("mask", TensorProto.FLOAT, [s, s], mask.flatten().tolist())
    nodes = [
        helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["Q", "Kt"], ["S0"]),
        helper.make_node("Mul", ["S0", "scale"], ["S1"]),
        helper.make_node("Add", ["S1", "mask"], ["S2"]),
        helper.make_node("Softmax", ["S2"], ["P"], axis=-1),
        helper.make_node("MatMul", ["P", "V"], ["Y"]),
    ]
    g = helper.make_graph(nodes, "attn", [q, k, v], [y], initializer=[scale, mask_t])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def build(c, opts):
    """The session of case `c` (BxSxHxDxCAUSAL), its feeds, and which graph it runs."""
    b, s, h, d, causal = (int(x) for x in c.split("x"))
    feeds = {n: np.random.rand(b, h, s, d).astype(np.float32) for n in ("Q", "K", "V")}
    note = "Attention op (opset 23)"
    try:
        sess = ort.InferenceSession(attention_model(b, s, h, d, causal).SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
    except Exception:  # older onnxruntime: no Attention kernel
        note = "MatMul-Softmax-MatMul graph"
        sess = ort.InferenceSession(matmul_softmax_model(b, s, h, d, causal).SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
    return sess, feeds, note


def case_name(c):
    b, s, h, d, causal = (int(x) for x in c.split("x"))
    return f"B={b} S={s} H={h} D={d}" + (" causal" if causal else "")


def serve(a, opts):
    sessions, notes = {}, {}
    for c in a.cases:
        sess, feeds, note = build(c, opts)
        for _ in range(a.warmup):
            sess.run(None, feeds)
        sessions[c] = (sess, feeds)
        notes[c] = f"onnxruntime {ort.__version__} {note}, {opts.intra_op_num_threads or 'default'} threads"
    serve_loop(sessions, {c: case_name(c) for c in sessions}, notes)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = ORT default)")
    ap.add_argument("--serve", action="store_true",
                    help="build the cases, warm up, then run `run BxSxHxDxCAUSAL` lines from stdin (see above)")
    a = ap.parse_args()
    opts = ort.SessionOptions()
    if a.threads:
        opts.intra_op_num_threads = a.threads
    if a.serve:
        serve(a, opts)
        return
    for c in a.cases:
        sess, feeds, note = build(c, opts)
        for _ in range(a.warmup):
            sess.run(None, feeds)
        ms = []
        cpu0 = time.process_time()
        for _ in range(max(1, a.runs)):
            t0 = time.perf_counter()
            sess.run(None, feeds)
            ms.append((time.perf_counter() - t0) * 1e3)
        cpu_ms = (time.process_time() - cpu0) * 1e3 / max(1, a.runs)
        ms.sort()
        n = len(ms)
        med = ms[n // 2] if n % 2 else 0.5 * (ms[n // 2 - 1] + ms[n // 2])
        name = case_name(c)
        print(json.dumps({"case": name, "min_ms": ms[0], "median_ms": med, "max_ms": ms[-1], "runs": n,
                          "note": f"onnxruntime {ort.__version__} {note}, {opts.intra_op_num_threads or 'default'} threads,"
                                  f" cpu {cpu_ms:.1f} ms/run"}),
              flush=True)


if __name__ == "__main__":
    main()
