#!/usr/bin/env python3
"""The model set on a GPU: cldl (OpenCL) against PyTorch (CUDA, float32 with TF32 off) on the same device,
with the device's float32 GEMM rate and copy bandwidth measured in the same run as the ceilings.

    python3 tools/bench/models_gpu.py --cldl build/cldl --models DIR [--export] [--only a,b] [--runs 20]
                                      [--budget 420] [--out results.json]

Per model: cldl's median ms (`cldl bench MODEL --json`), PyTorch's median ms (CUDA events, eager,
torch.no_grad), the model's convolution and matrix-product FLOPs (torch's FlopCounterMode) and the rate
they give at cldl's time; cldl's kernel time per op family from one `cldl profile --trace`; and cldl's
outputs against ONNX Runtime's (CPU) on the same input, as the largest absolute difference relative to the
output's largest magnitude. With --export, models missing from DIR are exported first (export_models.py,
in parallel with the timing). Models are taken in the order of --only (default: export_models.MODELS without
the two-stage detectors); none is started once --budget seconds have passed.
Needs torch + torchvision with CUDA, numpy and onnxruntime; the device is CLDL_DEVICE (default gpu)."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# kernel name (the part of a trace event's name after the node) -> op family
FAMILIES = [
    ("depthwise", r"conv_dw|depthwise"),
    ("gemm / conv", r"gemm|im2col|col2im|winograd|conv|dense|matmul|xgemm|Xgemm"),
    ("attention", r"attention|softmax_rows_attn"),
    ("softmax", r"softmax"),
    ("norm", r"norm|batchnorm|layernorm|rms"),
    ("pool", r"pool"),
    ("elementwise", r"fused|elementwise|binary|unary|clip|activation|cast|where|squeeze_excite|se_"),
    ("copy / layout", r"copy|transpose|concat|slice|split|gather|pad|resize|write|read|reshape|shuffle"),
    ("reduce", r"reduce|argmax|topk|nms|sort"),
]


def family(kernel):
    for name, pattern in FAMILIES:
        if re.search(pattern, kernel, re.IGNORECASE):
            return name
    return "other"


def ceilings(torch):
    """float32 GEMM (TF32 off) and device-to-device copy, measured with CUDA events."""
    torch.backends.cuda.matmul.allow_tf32 = False
    n = 8192
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    for _ in range(2):
        a @ b
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(5):
        a @ b
    e.record()
    torch.cuda.synchronize()
    tflops = 5 * 2 * n**3 / (s.elapsed_time(e) / 1e3) / 1e12
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    s.record()
    for _ in range(10):
        y.copy_(x)
    e.record()
    torch.cuda.synchronize()
    gbs = 10 * 2 * x.numel() / (s.elapsed_time(e) / 1e3) / 1e9
    del a, b, x, y
    torch.cuda.empty_cache()
    return tflops, gbs


def torch_model(name, export_models):
    import torch
    make, _ = export_models.MODELS[name]
    torch.manual_seed(0)
    return export_models.Plain(make().eval()) if not name.startswith(export_models.DETECTORS) else make().eval()


def torch_time(model, shape, runs, detection):
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    model = model.cuda()
    x = torch.randn(*shape, device="cuda")
    arg = ([x[0]],) if detection else (x,)
    with torch.no_grad():
        for _ in range(3):
            model(*arg)
        torch.cuda.synchronize()
        ts = []
        for _ in range(runs):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            model(*arg)
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        fc = FlopCounterMode(display=False)
        with fc:
            model(*arg)
    model.cpu()
    torch.cuda.empty_cache()
    return statistics.median(ts), fc.get_total_flops()


def cldl(binary, *args, env=None, timeout=600):
    r = subprocess.run([binary, *args], capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError((r.stderr or r.stdout).strip().splitlines()[-1] if (r.stderr or r.stdout).strip() else f"rc {r.returncode}")
    return r.stdout


def profile_families(binary, path, inputs, tmp):
    trace = os.path.join(tmp, "trace.json")
    cldl(binary, "profile", path, *inputs, "--trace", trace, "--top", "0")
    with open(trace) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    fam = {}
    for ev in events:
        if ev.get("ph") != "X":
            continue
        kernel = ev["name"].rsplit("/", 1)[-1]
        k = "host transfer" if ev["name"].startswith(("input ", "output ")) else family(kernel)
        fam[k] = fam.get(k, 0.0) + ev["dur"] / 1e3
    return fam, sum(1 for ev in events if ev.get("ph") == "X")


def check(binary, path, inputs, feed, tmp):
    import onnxruntime as ort
    out = tempfile.mkdtemp(dir=tmp)
    cldl(binary, "run", path, *inputs, "--runs", "1", "-o", out)
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    worst = 0.0
    for o, ref in zip(s.get_outputs(), s.run(None, feed)):
        got = np.load(os.path.join(out, o.name.replace("/", "_").replace(":", "_") + ".npy"))
        if got.shape != ref.shape:
            return float("inf")
        if ref.dtype.kind == "f" and ref.size:
            worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - ref))) / max(float(np.max(np.abs(ref))), 1e-6))
        elif ref.size:
            worst = max(worst, float(np.mean(got != ref)))
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cldl", default="build/cldl")
    ap.add_argument("--models", required=True)
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--only", default="")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds after which no model is started")
    ap.add_argument("--export", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--gemm", default="4096x4096x4096", help="a cldl bench gemm shape timed beside the ceilings")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    t0 = time.time()
    import export_models
    names = a.only.split(",") if a.only else [n for n in export_models.MODELS if not n.startswith(("fasterrcnn", "retinanet"))]
    os.makedirs(a.models, exist_ok=True)
    exporters = []
    if a.export:
        missing = [n for n in names if not os.path.exists(os.path.join(a.models, f"{n}_opset{a.opset}.onnx"))]
        for i in range(min(4, len(missing))):
            part = missing[i::4]
            exporters.append(subprocess.Popen([sys.executable, os.path.join(HERE, "export_models.py"), "--out", a.models,
                                               "--opsets", str(a.opset), "--only", ",".join(part)],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    results = {"device": "", "models": []}
    torch = None
    if not a.no_torch:
        import torch as torch_module
        torch = torch_module
        results["device"] = torch.cuda.get_device_name()
        results["fp32_tflops"], results["copy_gbs"] = ceilings(torch)
        print(f"{results['device']}: float32 GEMM (TF32 off, torch) {results['fp32_tflops']:.1f} TFLOP/s, "
              f"copy {results['copy_gbs']:.0f} GB/s", flush=True)
    if a.gemm:
        try:
            line = cldl(a.cldl, "bench", "gemm", "--set", f"shape={a.gemm}", "--no-compare", "--json", "--runs", "10")
            results["cldl_gemm"] = [json.loads(l) for l in line.splitlines() if l.startswith("{")]
            print("cldl bench gemm", a.gemm, results["cldl_gemm"], flush=True)
        except Exception as e:  # noqa: BLE001 - reported
            print("cldl bench gemm failed:", e, flush=True)

    def save():
        if a.out:
            with open(a.out, "w") as f:
                json.dump(results, f, indent=1)

    save()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            if time.time() - t0 > a.budget:
                print(f"{name}: not started (budget {a.budget:.0f} s spent)", flush=True)
                continue
            path = os.path.join(a.models, f"{name}_opset{a.opset}.onnx")
            while not os.path.exists(path[:-5] + ".json") and any(p.poll() is None for p in exporters):
                time.sleep(0.5)
            if not os.path.exists(path[:-5] + ".json"):
                print(f"{name}: no export", flush=True)
                continue
            with open(path[:-5] + ".json") as f:
                spec = json.load(f)["inputs"]
            feed, inputs = {}, []
            for k, (dtype, shape) in spec.items():
                feed[k] = rng.standard_normal(shape).astype(dtype)
                fn = os.path.join(tmp, f"{k}.npy")
                np.save(fn, feed[k])
                inputs += ["--input", f"{k}={fn}"]
            r = {"model": name}
            try:
                t = time.time()
                r["err"] = None if a.no_check else check(a.cldl, path, inputs, feed, tmp)
                r["first_run_s"] = time.time() - t
                js = json.loads(cldl(a.cldl, "bench", path, *inputs, "--runs", str(a.runs), "--warmup", "3", "--json",
                                     "--no-compare"))
                r["cldl_ms"], r["cldl_min_ms"] = js["median_ms"], js["min_ms"]
                r["families_ms"], r["commands"] = profile_families(a.cldl, path, inputs, tmp)
            except Exception as e:  # noqa: BLE001 - the error is the result
                r["error"] = str(e)[:300]
            if torch is not None:
                try:
                    detection = name.startswith(export_models.DETECTORS)
                    shape = export_models.MODELS[name][1]
                    r["torch_ms"], r["flops"] = torch_time(torch_model(name, export_models), shape, a.runs, detection)
                except Exception as e:  # noqa: BLE001
                    r["torch_error"] = str(e)[:300]
            results["models"].append(r)
            save()
            print(json.dumps(r), flush=True)
    for p in exporters:
        p.kill()
    rows = [r for r in results["models"] if "cldl_ms" in r]
    print("\n| model | cldl ms | PyTorch ms | PyTorch / cldl | GFLOP | cldl TFLOP/s | gemm/conv kernel ms | gemm/conv TFLOP/s | err |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        fl = r.get("flops", 0) / 1e9
        gk = r["families_ms"].get("gemm / conv", 0.0)
        tm = r.get("torch_ms")
        print(f"| {r['model']} | {r['cldl_ms']:.3f} | {tm:.3f} | {tm / r['cldl_ms']:.2f}x | {fl:.2f} | "
              f"{fl / r['cldl_ms']:.2f} | {gk:.3f} | {fl / gk if gk else 0:.2f} | {r['err'] if r['err'] is None else format(r['err'], '.1e')} |"
              if tm else f"| {r['model']} | {r['cldl_ms']:.3f} | - | - | - | - | {gk:.3f} | - | {r['err']} |")
    fams = sorted({k for r in rows for k in r["families_ms"]})
    print("\ncldl kernel time per op family, ms (from one profiled run)\n")
    print("| model | commands | " + " | ".join(fams) + " |")
    print("| --- " * (len(fams) + 2) + "|")
    for r in rows:
        print(f"| {r['model']} | {r['commands']} | " + " | ".join(f"{r['families_ms'].get(k, 0.0):.3f}" for k in fams) + " |")
    ratios = [r["torch_ms"] / r["cldl_ms"] for r in rows if r.get("torch_ms")]
    if ratios:
        print(f"geometric mean PyTorch / cldl: {float(np.exp(np.mean(np.log(ratios)))):.2f}x over {len(ratios)} models")
    for r in results["models"]:
        if "error" in r:
            print(f"{r['model']}: cldl error: {r['error']}")


if __name__ == "__main__":
    main()
