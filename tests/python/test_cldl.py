"""cldl.InferenceSession against a NumPy reference on the fixture's mlp.onnx (x [batch, 5] -> y = relu(x W^T
+ b) [batch, 7] and x_view = x); needs no peer. Tolerance: fp32 GEMM, rtol = atol = 1e-5."""
import os

import numpy as np
import pytest

import cldl
from conftest import DEVICE


def mlp_reference(x):
    o = np.arange(7)[:, None]
    i = np.arange(5)[None, :]
    w = ((o * 5 + i * 3) % 11 - 5).astype(np.float32) * 0.125
    b = (np.arange(7) % 3 - 1).astype(np.float32) * 0.5
    return np.maximum(x @ w.T + b, 0)


def test_devices():
    devs = cldl.devices()
    assert len(devs) >= 1
    for d in devs:
        assert d["name"]
        assert d["type"] in ("gpu", "cpu", "accelerator", "other")
    assert cldl.get_device() in ("GPU", "CPU", "ACCELERATOR", "OTHER")
    assert cldl.get_available_providers() == ["CLDLExecutionProvider"]


def test_info_and_run(mlp_path):
    for batch in (1, 3):
        s = cldl.InferenceSession(mlp_path, device=DEVICE, dims={"batch": batch})
        assert [i.name for i in s.get_inputs()] == ["x"]
        assert s.get_inputs()[0].type == "tensor(float)"
        assert s.get_inputs()[0].shape == [batch, 5]  # dims fixed the symbol
        assert sorted(o.name for o in s.get_outputs()) == ["x_view", "y"]
        x = np.random.default_rng(batch).standard_normal((batch, 5)).astype(np.float32)
        y, x_view = s.run(["y", "x_view"], {"x": x})
        assert y.dtype == np.float32 and y.shape == (batch, 7)
        np.testing.assert_allclose(y, mlp_reference(x), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(x_view, x)


def test_symbolic_shape_and_any_batch(mlp_path):
    # One session, any batch: a plan per signature, cached (LRU), reused on a known one.
    s = cldl.InferenceSession(mlp_path, provider_options=[{"device": DEVICE}])
    assert s.get_inputs()[0].shape == ["batch", 5]
    s.set_plan_cache(3)
    rng = np.random.default_rng(7)
    for batch in (1, 4, 2, 4, 7, 1, 9, 4):
        x = rng.standard_normal((batch, 5)).astype(np.float32)
        (y,) = s.run(["y"], {"x": x})
        assert y.shape == (batch, 7)
        np.testing.assert_allclose(y, mlp_reference(x), rtol=1e-5, atol=1e-5)
    pc = s.plan_cache
    assert pc["capacity"] == 3 and pc["plans"] == 3
    assert pc["hits"] + pc["misses"] == 8
    assert pc["hits"] == 1  # the second 4; by the second 1 and the last 4 they were evicted
    assert pc["evictions"] == pc["misses"] - 3


def test_non_contiguous_and_list_input(mlp_path):
    s = cldl.InferenceSession(mlp_path, device=DEVICE)
    x = np.arange(30, dtype=np.float32).reshape(5, 6).T[:3, :] / 10 - 1  # a transposed view
    np.testing.assert_allclose(s.run(["y"], {"x": x})[0], mlp_reference(x), rtol=1e-5, atol=1e-5)
    # Lists take the input's dtype, as onnxruntime does.
    lst = [[1, -2, 3, -4, 5]]
    np.testing.assert_allclose(s.run(["y"], {"x": lst})[0], mlp_reference(np.array(lst, np.float32)), rtol=1e-5)


def test_bytes_and_pathlike(mlp_path):
    import pathlib
    with open(mlp_path, "rb") as f:
        data = f.read()
    x = np.ones((2, 5), np.float32)
    for model in (data, bytearray(data), pathlib.Path(mlp_path)):
        s = cldl.InferenceSession(model, device=DEVICE)
        np.testing.assert_allclose(s.run(["y"], {"x": x})[0], mlp_reference(x), rtol=1e-5, atol=1e-5)


def test_errors(mlp_path):
    s = cldl.InferenceSession(mlp_path, device=DEVICE, dims={"batch": 2})
    with pytest.raises(cldl.Error, match=r"input 'x' dimension 1: expected 5 .*got 4"):
        s.run(None, {"x": np.zeros((3, 4), np.float32)})
    with pytest.raises(cldl.Error, match=r"input 'x': expected rank 2 .*got shape \[10\]"):
        s.run(None, {"x": np.zeros((10,), np.float32)})
    with pytest.raises(cldl.Error, match=r"input 'x': expected f32 \[batch, 5\], got i32 \[2, 5\]"):
        s.run(None, {"x": np.zeros((2, 5), np.int32)})
    with pytest.raises(cldl.Error, match=r"input 'x': expected f32 \[batch, 5\], got f64"):
        s.run(None, {"x": np.zeros((2, 5), np.float64)})
    with pytest.raises(cldl.Error, match=r"numpy dtype complex64 has no cldl dtype"):
        s.run(None, {"x": np.zeros((2, 5), np.complex64)})
    with pytest.raises(cldl.Error, match=r"'nope' is not an input"):
        s.run(None, {"nope": np.zeros((2, 5), np.float32)})
    with pytest.raises(cldl.Error, match=r"input 'x' .* is missing"):
        s.run(None, {})
    with pytest.raises(cldl.Error, match=r"'z' is not an output of the model \(it has: "):
        s.run(["y", "z"], {"x": np.zeros((2, 5), np.float32)})
    with pytest.raises(TypeError, match="input_feed must be a dict"):
        s.run(None, [np.zeros((2, 5), np.float32)])
    # The session stays usable after every error.
    x = np.ones((3, 5), np.float32)
    np.testing.assert_allclose(s.run(["y"], {"x": x})[0], mlp_reference(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(cldl.Error, match=r"/nonexistent\.onnx"):
        cldl.InferenceSession("/nonexistent.onnx")
    with pytest.raises(cldl.Error, match=r"no-such-device"):
        cldl.InferenceSession(mlp_path, device="no-such-device")
    with pytest.raises(cldl.Error, match=r"unknown provider 'NoSuchThing'"):
        cldl.InferenceSession(mlp_path, providers=["NoSuchThing"])
    with pytest.raises(TypeError, match="unexpected keyword"):
        cldl.InferenceSession(mlp_path, devcie="cpu")
    assert issubclass(cldl.Error, RuntimeError)


def test_providers_and_options(mlp_path):
    opts = cldl.SessionOptions()
    opts.graph_optimization_level = cldl.GraphOptimizationLevel.ORT_ENABLE_ALL
    s = cldl.InferenceSession(mlp_path, opts, providers=["CUDAExecutionProvider", ("CPUExecutionProvider", {})])
    assert s.get_providers() == ["CLDLExecutionProvider"]
    assert s.get_session_options() is opts
    assert s.get_provider_options()["CLDLExecutionProvider"]["device_name"] == s.device
    s = cldl.InferenceSession(mlp_path, providers=[("CLDLExecutionProvider", {"device": DEVICE})])
    assert s.get_provider_options()["CLDLExecutionProvider"]["device"] == DEVICE
    x = np.ones((1, 5), np.float32)
    np.testing.assert_allclose(s.run(None, {"x": x}, cldl.RunOptions())[0], mlp_reference(x), rtol=1e-5, atol=1e-5)
    meta = s.get_modelmeta()
    assert meta.graph_name and isinstance(meta.custom_metadata_map, dict)


def test_load_alias_and_bench(mlp_path):
    s = cldl.load(mlp_path, device=DEVICE, dims={"batch": 4})
    assert isinstance(s, cldl.InferenceSession)
    r = s.bench(iters=3, warmup=1)
    assert r["iters"] == 3 and r["mean_ms"] > 0 and r["min_ms"] <= r["median_ms"]
    with pytest.raises(cldl.Error):
        s.bench(iters=0)


def test_import_from_any_folder(tmp_path, mlp_path):
    # The package imports by name wherever the working folder is (the wheel carries libcldl beside it).
    import subprocess
    import sys
    code = "import cldl, sys; print(cldl.InferenceSession(sys.argv[1]).get_inputs()[0].name)"
    out = subprocess.run([sys.executable, "-c", code, mlp_path], cwd=tmp_path, capture_output=True, text=True,
                         env=dict(os.environ), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "x"


def test_threads_share_a_session(mlp_path):
    # onnxruntime allows run() from several threads on one session; cldl serialises them, results intact.
    from concurrent.futures import ThreadPoolExecutor
    s = cldl.InferenceSession(mlp_path, device=DEVICE)

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(10):
            x = rng.standard_normal((int(rng.integers(1, 9)), 5)).astype(np.float32)
            np.testing.assert_allclose(s.run(["y"], {"x": x})[0], mlp_reference(x), rtol=1e-5, atol=1e-5)
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(4)))
