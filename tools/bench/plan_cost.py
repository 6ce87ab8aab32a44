#!/usr/bin/python3
"""What dynamic shapes cost: one loaded model run at new and at known input-shape signatures.

It draws --shapes random signatures of a model's symbolic dims to measure, and as many others to warm up
with: a first loaded model runs the warm-up signatures once, so every program the model needs is built
and cached (warm program caches) but the measured signatures are new to the process. Then, on a second
load of the model, it times each measured signature's first run (the plan is made: shape inference,
folding, fusion, lowering with programs from the warm cache, the memory plan, a session's buffers, and
whatever the driver does on a kernel's first launch at a new size) and the median of --runs further runs
(the plan is found in the cache); the difference is what a new signature costs. It also times the same
shapes on a model loaded with those dims fixed (planned at load), so a known signature's overhead shows
against a fixed-shape load in the same process. On a shared machine a wall-clock difference of a few ms
is mostly the scheduler (a time slice is ~4 ms); the calling thread's CPU time (time.thread_time: the plan
is made on that thread, kernels run on PoCL's) of the first run minus a cached run is printed beside it.

PoCL compiles a work-group function per kernel and local size on first launch and keeps it in its disk
cache (POCL_CACHE_DIR), so a signature met by any earlier process may cost nothing there. The run
therefore uses a fresh PoCL cache under /tmp unless --pocl-cache shared; --warm same warms up with the
measured signatures themselves (what this tool did before: every PoCL compile falls in the warm-up).

    PYTHONPATH=build/python tools/bench/plan_cost.py MODEL.onnx [--dim-range batch=1:4 ...] [--shapes 10]

Symbolic dims without --dim-range take 1..32. int64 inputs get ids in [0, --vocab); inputs named *mask*
get ones. Prints one row per signature and the medians."""
import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--dim-range", action="append", default=[], help="SYMBOL=LO:HI (inclusive)")
    ap.add_argument("--shapes", type=int, default=10)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--vocab", type=int, default=100)
    ap.add_argument("--device", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm", choices=["other", "same"], default="other",
                    help="warm up with other signatures (default) or with the measured ones")
    ap.add_argument("--pocl-cache", choices=["fresh", "shared"], default="fresh",
                    help="a fresh PoCL kernel cache for this run (default) or the user's")
    a = ap.parse_args()
    if a.pocl_cache == "fresh":  # read when the OpenCL platform starts: before cldl is imported
        os.environ["POCL_CACHE_DIR"] = tempfile.mkdtemp(prefix="plan_cost_pocl_")
        atexit.register(shutil.rmtree, os.environ["POCL_CACHE_DIR"], True)
    import cldl
    ranges = {}
    for r in a.dim_range:
        k, v = r.split("=")
        lo, hi = v.split(":")
        ranges[k] = (int(lo), int(hi))
    rng = np.random.default_rng(a.seed)
    t0 = time.perf_counter()
    m = cldl.load(a.model, device=a.device)
    load_ms = (time.perf_counter() - t0) * 1e3
    symbols = sorted({d for i in m.get_inputs() for d in i.shape if isinstance(d, str)})
    print(f"{a.model} on {m.device}: load {load_ms:.1f} ms, symbols {symbols}")

    def feed(dims):
        f = {}
        for i in m.get_inputs():
            shape = tuple(dims[d] if isinstance(d, str) else d for d in i.shape)
            if i.type == "tensor(int64)":
                f[i.name] = np.ones(shape, np.int64) if "mask" in i.name else rng.integers(0, a.vocab, shape).astype(np.int64)
            else:
                f[i.name] = rng.standard_normal(shape).astype(np.float32)
        return f

    def timed(model, f, cpu=None):
        t, c = time.perf_counter(), time.thread_time()
        model.run(None, f)
        if cpu is not None:  # the calling thread's CPU time: planning runs there, kernels on PoCL's threads
            cpu.append((time.thread_time() - c) * 1e3)
        return (time.perf_counter() - t) * 1e3

    sigs, seen = [], set()
    space = 1
    for s in symbols:
        lo, hi = ranges.get(s, (1, 32))
        space *= hi - lo + 1
    want = a.shapes * (2 if a.warm == "other" else 1)
    if want > space:
        sys.exit(f"--shapes {a.shapes}: the dim ranges hold {space} signatures, {want} are needed")
    while len(sigs) < want:
        dims = {s: int(rng.integers(ranges.get(s, (1, 32))[0], ranges.get(s, (1, 32))[1] + 1)) for s in symbols}
        key = tuple(sorted(dims.items()))
        if key not in seen:
            seen.add(key)
            sigs.append((key, dims, feed(dims)))
    warm = sigs[a.shapes:] if a.warm == "other" else sigs
    sigs = sigs[:a.shapes]
    t0 = time.perf_counter()
    for _, _, f in warm:
        m.run(None, f)
    print(f"warm-up: {len(warm)} {'other' if a.warm == 'other' else 'measured'} signatures once, "
          f"{(time.perf_counter() - t0) * 1e3:.0f} ms; PoCL cache: {os.environ.get('POCL_CACHE_DIR', 'default')}")
    m = cldl.load(a.model, device=a.device)
    rows, phases, cpu_new = [], [], []
    print(f"{'signature':<28} {'first run':>10} {'of it: plan':>12} {'cached run':>11} {'new sig.':>10} {'fixed load':>11}"
          f" {'new sig. CPU':>13}")
    for key, dims, f in sigs:
        cpu = []
        first = timed(m, f, cpu)
        plan = m.plan_cache["last_plan_ms"]
        phases.append(m.plan_cache.get("last_plan_phases", {}))
        cached = statistics.median(timed(m, f, cpu) for _ in range(a.runs))
        cpu_new.append(cpu[0] - statistics.median(cpu[1:]))
        fixed = cldl.load(a.model, device=a.device, dims=dims)
        timed(fixed, f)
        fixed_ms = statistics.median(timed(fixed, f) for _ in range(a.runs))
        rows.append((first, cached, fixed_ms, plan))
        sig = ",".join(f"{k}={v}" for k, v in key)
        print(f"{sig:<28} {first:>8.2f}ms {plan:>10.2f}ms {cached:>9.3f}ms {first - cached:>8.2f}ms {fixed_ms:>9.3f}ms"
              f" {cpu_new[-1]:>11.2f}ms")
    med = [statistics.median(c) for c in zip(*rows)]
    new_sig = statistics.median(r[0] - r[1] for r in rows)
    ratio = statistics.median(r[1] / r[2] for r in rows)
    stats = {k: v for k, v in m.plan_cache.items() if k != "last_plan_phases"}
    print(f"median: first run {med[0]:.2f} ms (plan {med[3]:.2f} ms), cached run {med[1]:.3f} ms, "
          f"new signature {new_sig:.2f} ms (CPU time of the calling thread {statistics.median(cpu_new):.2f} ms), "
          f"fixed-shape run {med[2]:.3f} ms (cached / fixed {ratio:.3f}x); "
          f"cache {stats}")
    if phases and phases[0]:
        print("plan phases, median ms: " + ", ".join(
            f"{k} {statistics.median(p[k] for p in phases):.2f}" for k in phases[0]))


if __name__ == "__main__":
    main()
