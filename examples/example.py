#!/usr/bin/python3
"""Runs an ONNX model with cldl's Python package, onnxruntime's API: example.py model.onnx (tests: the
fixture's mlp.onnx, input x [batch, 5])."""
import sys

import numpy as np
import cldl

print([d["name"] for d in cldl.devices()])
sess = cldl.InferenceSession(sys.argv[1])  # device="gpu:0" (the CLI's --device spec) picks one
print(sess.get_inputs(), sess.get_outputs())
x_name = sess.get_inputs()[0].name
(y,) = sess.run(["y"], {x_name: np.arange(10, dtype=np.float32).reshape(2, 5) - 4})
print(y)
print(sess.run(None, {x_name: np.ones((7, 5), np.float32)})[0].shape)  # any batch, per call
print(sess.bench(iters=10))
