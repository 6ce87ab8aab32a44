#!/usr/bin/env python3
"""ONNX Runtime (CPU) peer for `cldl bench rnn`: the same stacked-LSTM inference configurations, built as
an ONNX model (LSTM nodes joined by Squeeze of the direction axis) and timed with onnxruntime.

    pip install onnxruntime onnx
    python3 tools/bench/rnn_onnxruntime.py [--runs 5] [--warmup 1] [--threads N] [--quick] [--json]
                                           [--case T,B,I,H,L ...]

`cldl bench rnn` runs it in the same run (--no-compare skips it) in --serve mode, with --threads 2 and one
--case per configuration it times: the script builds every case's session and does the warm-ups, prints
{"ready": true, "cases": ["T,B,I,H,L", ...], "names": {case: name}, "notes": {case: note}}, then reads stdin lines: `run T,B,I,H,L`
runs that case once and prints {"case": "T,B,I,H,L", "ms": wall ms, "cpu_ms": process cpu ms}; `quit` or
EOF ends it. So cldl times the peer round by round between its own runs. ONNX Runtime keeps its defaults,
intra-op spinning included (turning it off made the T100 B1 4-layer case 1.65x slower here): its idle
threads spin for up to ~40 ms after a run, so cldl pauses before timing its own next run. Without --serve
it times --runs runs per case itself (--json: one line each).
"""
import argparse
import json
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from peer_serve import serve_loop  # tools/bench/, next to this script

CASES = [(100, 32, 512, 512, 1), (100, 32, 512, 512, 2), (100, 1, 256, 256, 4), (200, 64, 256, 256, 2)]
QUICK = [(10, 4, 64, 64, 1), (10, 4, 64, 64, 2), (10, 1, 32, 32, 4), (12, 8, 32, 32, 2)]


def lstm_stack(T, B, I, H, L, rng):
    nodes, inits = [], []
    x = "X"
    for l in range(L):
        i = I if l == 0 else H
        for name, shape in ((f"W{l}", (1, 4 * H, i)), (f"R{l}", (1, 4 * H, H)), (f"B{l}", (1, 8 * H))):
            inits.append(numpy_helper.from_array(rng.uniform(-0.1, 0.1, shape).astype(np.float32), name))
        nodes.append(helper.make_node("LSTM", [x, f"W{l}", f"R{l}", f"B{l}"], [f"Y{l}"], hidden_size=H))
        inits.append(numpy_helper.from_array(np.array([1], dtype=np.int64), f"ax{l}"))
        nodes.append(helper.make_node("Squeeze", [f"Y{l}", f"ax{l}"], [f"S{l}"]))
        x = f"S{l}"
    graph = helper.make_graph(nodes, "lstm_stack",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [T, B, I])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [T, B, H])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by older onnxruntime releases too
    return model


def flops(T, B, I, H, L):
    return sum(2.0 * T * B * 4 * H * ((I if l == 0 else H) + H) for l in range(L))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = ORT default)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--case", action="append", default=[], metavar="T,B,I,H,L",
                    help="only these configurations (repeatable); default: the issue's four")
    ap.add_argument("--serve", action="store_true",
                    help="build the cases, warm up, then run `run T,B,I,H,L` lines from stdin (see above)")
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    so = ort.SessionOptions()
    if a.threads:
        so.intra_op_num_threads = a.threads
    cases = [tuple(int(v) for v in c.split(",")) for c in a.case] or (QUICK if a.quick else CASES)
    if a.serve:
        serve(a, so, cases, rng)
        return
    for (T, B, I, H, L) in cases:
        model = lstm_stack(T, B, I, H, L, rng)
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        x = rng.uniform(-1, 1, (T, B, I)).astype(np.float32)
        for _ in range(a.warmup):
            sess.run(None, {"X": x})
        ms, cpu = [], []
        for _ in range(max(1, a.runs)):
            c0 = time.process_time()
            t0 = time.perf_counter()
            sess.run(None, {"X": x})
            ms.append((time.perf_counter() - t0) * 1e3)
            cpu.append((time.process_time() - c0) * 1e3)
        name = f"lstm T{T} B{B} I{I} H{H} L{L}"
        med = statistics.median(ms)
        rate = flops(T, B, I, H, L) / (med * 1e6)
        if a.json:
            print(json.dumps({"family": "rnn", "name": name, "impl": "onnxruntime", "min_ms": min(ms), "median_ms": med,
                              "max_ms": max(ms), "runs": len(ms), "rate": rate, "unit": "GFLOP/s",
                              "note": f"onnxruntime {ort.__version__} CPU, "
                                      f"{a.threads or 'default'} intra-op threads; "
                                      f"cpu {statistics.median(cpu):.1f} ms/run (median, spinning threads included)"}),
                  flush=True)
        else:
            print(f"rnn      {name:<44} {'onnxruntime':<14} {min(ms):10.3f} {med:10.3f} {max(ms):10.3f} {rate:7.2f} GFLOP  "
                  f"onnxruntime {ort.__version__} CPU")


def serve(a, so, cases, rng):
    sessions, notes = {}, {}
    for (T, B, I, H, L) in cases:
        cid = f"{T},{B},{I},{H},{L}"
        sess = ort.InferenceSession(lstm_stack(T, B, I, H, L, rng).SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        x = rng.uniform(-1, 1, (T, B, I)).astype(np.float32)
        for _ in range(a.warmup):
            sess.run(None, {"X": x})
        sessions[cid] = (sess, {"X": x})
        notes[cid] = f"onnxruntime {ort.__version__} CPU, {a.threads or 'default'} intra-op threads"
    serve_loop(sessions, {c: "lstm T{} B{} I{} H{} L{}".format(*c.split(",")) for c in sessions}, notes)

if __name__ == "__main__":
    main()
