#!/usr/bin/python3
"""cldl against ONNX Runtime on the same models, inputs and threads: median ms of each and the ratio
ORT / cldl (> 1: cldl is faster). Inputs are drawn once (seeded), written as .npy and given to every
cldl build with --input, and to ORT (intra-op threads --threads, default 2) from the same arrays.

    python tools/bench/models_vs_ort.py [--cldl build/cldl ...] [--runs 40] [--models DIR] [--only SUBSTR]

With --models DIR: every DIR/*.onnx that has a DIR/*.json input spec (tools/bench/export_models.py writes
both) instead of the built-in list; a model cldl cannot run is listed with cldl's error and left out of
the geometric mean. With --check: no timing; each model's outputs against ONNX Runtime's (the largest
absolute difference relative to the output's largest magnitude).

Several --cldl binaries (e.g. a build before and after a change) are timed in alternating rounds.
Needs onnxruntime and numpy (PyPI); the models are the zoo's and tests/data/dynamic's."""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (model, {input: (dtype, shape)}); int64 inputs named *mask* are ones, other int64 ids below 100.
MODELS = [
    ("models/zoo/digits_cnn/model.onnx", {"image": ("float32", (1, 1, 8, 8))}),
    ("models/zoo/digits_cnn/model.onnx", {"image": ("float32", (450, 1, 8, 8))}),
    ("tests/data/dynamic/cnn.onnx", {"image": ("float32", (2, 3, 64, 64))}),
    ("tests/data/dynamic/bert_opset14.onnx", {"input_ids": ("int64", (4, 64)), "attention_mask": ("int64", (4, 64))}),
]


def inputs(spec, rng):
    feed = {}
    for name, (dtype, shape) in spec.items():
        if dtype == "int64":
            feed[name] = np.ones(shape, np.int64) if "mask" in name else rng.integers(0, 100, shape).astype(np.int64)
        else:
            feed[name] = rng.standard_normal(shape).astype(dtype)
    return feed


def ort_median(path, feed, runs, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for _ in range(5):
        s.run(None, feed)
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        s.run(None, feed)
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def cldl_median(binary, path, files, runs):
    cmd = [binary, "bench", path, "--runs", str(runs), "--warmup", "5", "--json", "--no-compare"]
    for name, f in files.items():
        cmd += ["--input", f"{name}={f}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["median_ms"]


def check_outputs(binary, path, files, feed, tmp):
    """cldl's outputs against ONNX Runtime's on the same inputs: (worst max-abs error relative to the
    output's largest magnitude, the output it was in)."""
    out_dir = tempfile.mkdtemp(dir=tmp)
    cmd = [binary, "run", path, "--runs", "1", "-o", out_dir]
    for name, f in files.items():
        cmd += ["--input", f"{name}={f}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    refs = dict(zip(names, s.run(None, feed)))
    gots = {n: np.load(os.path.join(out_dir, n.replace("/", "_").replace(":", "_") + ".npy")) for n in names}
    note = ""
    if detection_order_differs(gots, refs):
        # Scores a few ulps apart (random weights give many near ties) may be ranked the other way: compare
        # the detections as sets, each runtime's rows in one canonical order.
        for d in (gots, refs):
            order = canonical_detection_order(d)
            for n in ("boxes", "scores", "labels"):
                d[n] = d[n][order]
        note = ", detections compared as sets"
    worst, where = 0.0, ""
    for o in s.get_outputs():
        ref, got = refs[o.name], gots[o.name]
        if got.shape != ref.shape:
            return float("inf"), f"{o.name}: shape {got.shape} vs {ref.shape}"
        if ref.dtype.kind != "f":
            err = float(np.max(got != ref)) if ref.size else 0.0
        else:
            err = float(np.max(np.abs(got.astype(np.float64) - ref))) / max(float(np.max(np.abs(ref))), 1e-6) if ref.size else 0.0
        if err > worst:
            worst, where = err, o.name
    return worst, where + note


def detection_order_differs(gots, refs):
    """Detector outputs (boxes [N, 4], scores [N], labels [N]) of equal N whose rows are ordered differently."""
    if not all(n in gots and n in refs for n in ("boxes", "scores", "labels")):
        return False
    if any(gots[n].shape != refs[n].shape for n in ("boxes", "scores", "labels")) or refs["boxes"].ndim != 2:
        return False
    return bool(np.any(gots["labels"] != refs["labels"]))


def canonical_detection_order(d):
    """Rows sorted by label, then the box rounded to 1e-2 pixels, then score."""
    b = np.round(d["boxes"].astype(np.float64), 2)
    return np.lexsort((d["scores"], b[:, 3], b[:, 2], b[:, 1], b[:, 0], d["labels"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cldl", action="append", default=[])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="")
    ap.add_argument("--only", default="")
    ap.add_argument("--check", action="store_true", help="compare outputs with ORT's instead of timing")
    a = ap.parse_args()
    binaries = a.cldl or [os.path.join(ROOT, "build", "cldl")]
    models = MODELS
    if a.models:
        models = []
        for f in sorted(os.listdir(a.models)):
            spec_path = os.path.join(a.models, f[:-5] + ".json")
            if f.endswith(".onnx") and os.path.exists(spec_path):
                with open(spec_path) as sf:
                    spec = {k: (t, tuple(s)) for k, (t, s) in json.load(sf)["inputs"].items()}
                models.append((os.path.join(a.models, f), spec))
    models = [(m, s) for m, s in models if a.only in m]
    failed = []
    rng = np.random.default_rng(0)
    tmp = tempfile.mkdtemp(prefix="cldl-vs-ort-")
    ratios = {b: [] for b in binaries}
    for k, (model, spec) in enumerate(models):
        path = os.path.join(ROOT, model)
        feed = inputs(spec, rng)
        files = {}
        for name, v in feed.items():
            files[name] = os.path.join(tmp, f"{k}_{name}.npy")
            np.save(files[name], v)
        if a.check:
            for b in binaries:
                try:
                    err, where = check_outputs(b, path, files, feed, tmp)
                    print(f"{model}: {b}: max |cldl - ORT| / max |ORT| = {err:.2e} ({where})", flush=True)
                except subprocess.CalledProcessError as e:
                    print(f"{model}: {b}: FAILED {(e.stderr or '').strip().splitlines()[-1:]}", flush=True)
            continue
        o, c = [], {b: [] for b in binaries}
        try:
            for _ in range(a.rounds):
                o.append(ort_median(path, feed, a.runs, a.threads))
                for b in binaries:
                    c[b].append(cldl_median(b, path, files, a.runs))
        except subprocess.CalledProcessError as e:
            err = (e.stderr or "").strip().splitlines()
            failed.append(f"{model}: {err[-1] if err else e}")
            print("FAILED", failed[-1], flush=True)
            continue
        shape = ", ".join(f"{n} {list(s)}" for n, (_, s) in spec.items())
        ort_ms = statistics.median(o)
        line = f"{model} ({shape}): ORT {ort_ms:.3f} ms"
        for b in binaries:
            ms = statistics.median(c[b])
            ratios[b].append(ort_ms / ms)
            line += f" | {b}: {ms:.3f} ms, ORT/cldl {ort_ms / ms:.2f}x"
        print(line, flush=True)
    for f in failed:
        print("not run:", f)
    for b in binaries:
        if not ratios[b]:
            continue
        geo = float(np.exp(np.mean(np.log(ratios[b]))))
        print(f"{b}: geometric mean ORT/cldl {geo:.2f}x over {len(ratios[b])} cases")


if __name__ == "__main__":
    main()
