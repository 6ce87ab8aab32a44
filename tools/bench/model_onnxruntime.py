#!/usr/bin/python3
"""The peers of `cldl bench MODEL.onnx --compare` (and of `cldl bench FOLDER`): ONNX Runtime's CPU session
of MODEL on the input files cldl runs (--input NAME=FILE.npy) with --threads intra-op threads, served as
the case "model" (tools/bench/peer_serve.py): `run model` answers one timed run. Where OpenVINO is
installed (PyPI `openvino`), its CPU plugin with as many inference threads is the case "openvino"; a model
it cannot read or compile is left out with the reason on stderr. Needs onnxruntime and numpy (PyPI).

    tools/bench/model_onnxruntime.py MODEL.onnx --input x=X.npy [--threads 2] [--warmup 3] [--no-openvino] --serve"""
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
    ap.add_argument("--no-openvino", action="store_true", help="ONNX Runtime only")
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
    sessions = {"model": (sess, feeds)}
    names = {"model": os.path.basename(a.model)}
    notes = {"model": f"onnxruntime {ort.__version__} CPU, {a.threads} intra-op threads"}
    if not a.no_openvino:
        ov = openvino_session(a.model, feeds, a.threads, a.warmup)
        if ov:
            sessions["openvino"] = (ov, feeds)
            names["openvino"] = names["model"]
            notes["openvino"] = ov.note
    serve_loop(sessions, names, notes)


class OpenVinoSession:
    """OpenVINO's CPU plugin behind the run(None, feeds) call that serve_loop makes."""

    def __init__(self, compiled, note):
        self.request = compiled.create_infer_request()
        self.note = note

    def run(self, _outputs, feeds):
        return self.request.infer(feeds)


def openvino_session(path, feeds, threads, warmup):
    try:
        import openvino as ov
    except ImportError:
        return None
    try:
        core = ov.Core()
        model = core.read_model(path)
        model.reshape({name: list(v.shape) for name, v in feeds.items()})
        compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"})
        s = OpenVinoSession(compiled, f"openvino {ov.get_version().split('-')[0]} CPU, {threads} inference threads")
        for _ in range(max(warmup, 1)):
            s.run(None, feeds)
        return s
    except Exception as e:  # noqa: BLE001 - the reason is the result
        print(f"openvino: {os.path.basename(path)} left out: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
              file=sys.stderr)
        return None


if __name__ == "__main__":
    main()
