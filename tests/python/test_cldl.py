#!/usr/bin/python3
"""The Python module against a NumPy reference (run by ctest with PYTHONPATH at the built module and
CLDL_TEST_MODELS at the models tests/capi/make_models.cpp writes)."""
import os
import unittest

import numpy as np

import cldl

MODELS = os.environ.get("CLDL_TEST_MODELS", "")
MLP = os.path.join(MODELS, "mlp.onnx")
# The suite's device (ctest sets CLDL_DEVICE: cpu, or accelerator on Intel's FPGA emulator).
DEVICE = os.environ.get("CLDL_DEVICE") or "cpu"


def mlp_reference(x):
    o = np.arange(7)[:, None]
    i = np.arange(5)[None, :]
    w = ((o * 5 + i * 3) % 11 - 5).astype(np.float32) * 0.125
    b = (np.arange(7) % 3 - 1).astype(np.float32) * 0.5
    return np.maximum(x @ w.T + b, 0)


class TestCldl(unittest.TestCase):
    def test_devices(self):
        devs = cldl.devices()
        self.assertGreaterEqual(len(devs), 1)
        for d in devs:
            self.assertTrue(d["name"])
            self.assertIn(d["type"], ("gpu", "cpu", "accelerator", "other"))

    def test_info_and_run(self):
        for batch in (1, 3):
            m = cldl.load(MLP, device=DEVICE, dims={"batch": batch})
            self.assertEqual([i.name for i in m.inputs], ["x"])
            self.assertEqual(m.inputs[0].dtype, np.dtype("float32"))
            self.assertEqual(m.inputs[0].shape, (batch, 5))
            self.assertEqual(m.inputs[0].symbols, ("batch", None))
            self.assertEqual(sorted(o.name for o in m.outputs), ["x_view", "y"])
            rng = np.random.default_rng(batch)
            x = rng.standard_normal((batch, 5)).astype(np.float32)
            out = m.run({"x": x})
            self.assertEqual(out["y"].dtype, np.float32)
            self.assertEqual(out["y"].shape, (batch, 7))
            np.testing.assert_allclose(out["y"], mlp_reference(x), rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(out["x_view"], x)

    def test_non_contiguous_input(self):
        m = cldl.load(MLP, dims={"batch": 3})
        x = np.arange(30, dtype=np.float32).reshape(5, 6).T[:3, :] / 10 - 1  # a transposed view
        np.testing.assert_allclose(m.run({"x": x})["y"], mlp_reference(x), rtol=1e-5, atol=1e-5)

    def test_any_shape(self):
        # One load, any batch: a plan per signature, cached (LRU), reused on a known one.
        m = cldl.load(MLP, device=DEVICE)
        self.assertEqual(m.inputs[0].shape, (None, 5))
        self.assertEqual(m.inputs[0].symbols, ("batch", None))
        m.set_plan_cache(3)
        rng = np.random.default_rng(7)
        for batch in (1, 4, 2, 4, 7, 1, 9, 4):
            x = rng.standard_normal((batch, 5)).astype(np.float32)
            out = m.run({"x": x})
            self.assertEqual(out["y"].shape, (batch, 7))
            np.testing.assert_allclose(out["y"], mlp_reference(x), rtol=1e-5, atol=1e-5)
        pc = m.plan_cache
        self.assertEqual(pc["capacity"], 3)
        self.assertEqual(pc["plans"], 3)
        self.assertEqual(pc["hits"] + pc["misses"], 8)
        self.assertEqual(pc["hits"], 1)  # the second 4; by the second 1 and the last 4 they were evicted
        self.assertEqual(pc["evictions"], pc["misses"] - 3)

    def test_errors(self):
        m = cldl.load(MLP, dims={"batch": 2})
        with self.assertRaisesRegex(cldl.Error, r"input 'x' dimension 1: expected 5 .*got 4"):
            m.run({"x": np.zeros((3, 4), np.float32)})
        with self.assertRaisesRegex(cldl.Error, r"input 'x': expected rank 2 .*got shape \[10\]"):
            m.run({"x": np.zeros((10,), np.float32)})
        with self.assertRaisesRegex(cldl.Error, r"input 'x': expected f32 \[batch, 5\], got i32 \[2, 5\]"):
            m.run({"x": np.zeros((2, 5), np.int32)})
        with self.assertRaisesRegex(cldl.Error, r"input 'x': expected f32 \[batch, 5\], got f64"):
            m.run({"x": np.zeros((2, 5), np.float64)})
        with self.assertRaisesRegex(cldl.Error, r"numpy dtype complex64 has no cldl dtype"):
            m.run({"x": np.zeros((2, 5), np.complex64)})
        with self.assertRaisesRegex(cldl.Error, r"'nope' is not an input"):
            m.run({"nope": np.zeros((2, 5), np.float32)})
        with self.assertRaisesRegex(cldl.Error, r"input 'x' .* is missing"):
            m.run({})
        # The model stays usable after every error.
        x = np.ones((3, 5), np.float32)
        np.testing.assert_allclose(m.run({"x": x})["y"], mlp_reference(x), rtol=1e-5, atol=1e-5)
        with self.assertRaisesRegex(cldl.Error, r"/nonexistent\.onnx"):
            cldl.load("/nonexistent.onnx")
        with self.assertRaisesRegex(cldl.Error, r"no-such-device"):
            cldl.load(MLP, device="no-such-device", dims={"batch": 1})
        self.assertTrue(issubclass(cldl.Error, RuntimeError))

    def test_bench(self):
        m = cldl.load(MLP, dims={"batch": 4})
        r = m.bench(iters=3, warmup=1)
        self.assertEqual(r["iters"], 3)
        self.assertGreater(r["mean_ms"], 0)
        self.assertLessEqual(r["min_ms"], r["median_ms"])
        with self.assertRaises(cldl.Error):
            m.bench(iters=0)


if __name__ == "__main__":
    unittest.main()
