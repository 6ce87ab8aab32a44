#!/usr/bin/python3
"""Runs an ONNX model with cldl's Python module: example.py model.onnx (tests: the fixture's mlp.onnx)."""
import sys

import numpy as np
import cldl

print([d["name"] for d in cldl.devices()])
m = cldl.load(sys.argv[1], device=None)  # device: a spec as the CLI's --device
print(m.inputs, m.outputs)
out = m.run({"x": np.arange(10, dtype=np.float32).reshape(2, 5) - 4})
print(out["y"])
print(m.run({"x": np.ones((7, 5), np.float32)})["y"].shape)  # any batch
print(m.bench(iters=10))
