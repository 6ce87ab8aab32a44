#!/usr/bin/env python3
"""Paired A/B of one model's latency for a machine whose speed drifts: A and B (`cldl run MODEL --random --bench`,
each a process) alternate PAIRS times, the order flipped each pair, and the median of the pairs' ratios B/A of
the runs' minimum latency is printed with its quartiles. A slow spell then hits both sides of a pair instead of
a whole round of one build (models_vs_ort.py's rounds).

  tools/bench/ab_pairs.py MODEL.onnx PAIRS "A" "B" [RUN_ARGS ...]   # A, B: "[ENV=VALUE ...] /path/to/cldl"
  tools/bench/ab_pairs.py resnet18.onnx 12 "CLDL_SKIP_PASSES=residual-add build/cldl" "build/cldl"
  tools/bench/ab_pairs.py digits.onnx 12 "CLDL_SKIP_PASSES=conv-maxpool build/cldl" build/cldl --dim N=450 --runs 50

RUN_ARGS go to every `cldl run` after `--random --bench` (a batch size, more runs).
"""
import os
import re
import statistics
import subprocess
import sys


def latency(spec, model, extra):
    parts = spec.split()
    env = dict(os.environ)
    while parts and "=" in parts[0]:
        k, v = parts.pop(0).split("=", 1)
        env[k] = v
    out = subprocess.run(parts + ["run", model, "--random", "--bench"] + extra, env=env, capture_output=True, text=True)
    m = re.search(r"latency min ([0-9.]+) ms", out.stdout)
    if not m:
        raise SystemExit(f"{spec}: no latency in its output:\n{out.stdout}{out.stderr}")
    return float(m.group(1))


def alternate(a, b, pairs):
    """Calls a() and b() `pairs` times each, in pairs whose order flips each time; returns both lists of results."""
    a_out, b_out = [], []
    for i in range(pairs):
        if i % 2 == 0:
            a_out.append(a())
            b_out.append(b())
        else:
            b_out.append(b())
            a_out.append(a())
    return a_out, b_out


def ratio_stats(num, den):
    """The median and quartiles of the pairs' ratios num / den."""
    ratios = [n / d for n, d in zip(num, den)]
    q = statistics.quantiles(ratios, n=4)
    return statistics.median(ratios), q[0], q[2]


def main():
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    model, pairs, a_spec, b_spec = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    extra = sys.argv[5:]
    if pairs < 2:
        raise SystemExit("PAIRS must be at least 2")
    a_ms, b_ms = alternate(lambda: latency(a_spec, model, extra), lambda: latency(b_spec, model, extra), pairs)
    med, q1, q3 = ratio_stats(b_ms, a_ms)
    print(f"{os.path.basename(model)}: A min {min(a_ms):.3f} median {statistics.median(a_ms):.3f} ms | B min "
          f"{min(b_ms):.3f} median {statistics.median(b_ms):.3f} ms | B/A {med:.3f} (quartiles {q1:.3f}-{q3:.3f}, "
          f"{pairs} pairs)")


if __name__ == "__main__":
    main()
