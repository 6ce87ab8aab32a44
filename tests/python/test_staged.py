"""Models whose plans decide at run time (staged plans, docs/dynamic-shapes.md) through cldl.load + run and
cldl.InferenceSession, against NumPy references: the fixture's nonzero.onnx, if_data.onnx and
loop_data.onnx (tests/capi/make_models.cpp). Each runs at several inputs in one session and returns the
shapes the data decided; a shape the graph cannot take is an error naming the node, and the session goes on."""
import os

import numpy as np
import pytest

import cldl
from conftest import DEVICE, MODELS


def model_path(name):
    p = os.path.join(MODELS, name)
    if not os.path.exists(p):
        pytest.skip(f"CLDL_TEST_MODELS does not hold {name} (ctest's fixture capi_models writes it)")
    return p


def run(m, feeds):
    """All outputs by name."""
    return dict(zip((o.name for o in m.get_outputs()), m.run(None, feeds)))


def test_nonzero_counts():
    m = cldl.load(model_path("nonzero.onnx"), device=DEVICE)
    rng = np.random.default_rng(3)
    w = np.array([1.5], np.float32)
    for r, c in ((3, 5), (1, 1), (4, 7), (6, 9), (3, 5)):
        x = rng.integers(-2, 3, (r, c)).astype(np.float32)
        out = run(m, {"x": x, "w": w})
        nz = np.stack(np.nonzero(x))
        assert out["nz"].dtype == np.int64 and out["nz"].shape == nz.shape
        np.testing.assert_array_equal(out["nz"], nz)
        np.testing.assert_array_equal(out["vals"], x[np.nonzero(x)] * w)
    out = run(m, {"x": np.zeros((2, 3), np.float32), "w": w})  # a count of 0: empty outputs
    assert out["nz"].shape == (2, 0) and out["vals"].shape == (0,)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)  # count 5 against w of 3: the rest's plan fails
    with pytest.raises(cldl.Error, match=r"node 'Mul_3' \(Mul\).*\[3\] does not broadcast"):
        run(m, {"x": x, "w": np.ones(3, np.float32)})
    np.testing.assert_array_equal(run(m, {"x": x, "w": w})["vals"], x[np.nonzero(x)] * w)


def test_if_on_data():
    s = cldl.InferenceSession(model_path("if_data.onnx"), device=DEVICE)
    rng = np.random.default_rng(5)
    for n in (6, 4, 10, 2, 6):
        x = rng.standard_normal(n).astype(np.float32)
        y, positive = s.run(["y", "positive"], {"x": x})
        want = x.reshape(-1, 2) if x.sum() > 0 else (-x).reshape(2, -1)
        assert y.shape == want.shape and bool(positive) == (x.sum() > 0)
        np.testing.assert_array_equal(y, want)
    with pytest.raises(cldl.Error, match=r"x: \[5\].*Reshape.*cannot reshape \[5\]"):
        s.run(None, {"x": np.ones(5, np.float32)})
    (y,) = s.run(["y"], {"x": np.ones(4, np.float32)})
    np.testing.assert_array_equal(y, np.ones((2, 2), np.float32))


def test_loop_trip_count_from_data():
    m = cldl.load(model_path("loop_data.onnx"), device=DEVICE)
    rng = np.random.default_rng(7)
    for n, peak in ((3, 2.5), (1, 1.0), (7, 4.75), (5, 1.9)):
        x = (rng.integers(-2, 3, n) * 0.25).astype(np.float32)
        x[0] = peak
        acc, accs = x.copy(), []
        for _ in range(int(peak)):
            acc = acc * np.float32(0.5) + x
            accs.append(acc)
        out = run(m, {"x": x})
        assert out["accs"].shape == (int(peak), n)
        np.testing.assert_allclose(out["acc"], acc, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(out["accs"], np.stack(accs), rtol=1e-6, atol=1e-6)
        # run(feed), the dict alone, is run(None, feed): every output in the model's order.
        assert [a.shape for a in m.run({"x": x})] == [out[o.name].shape for o in m.get_outputs()]
        np.testing.assert_array_equal(m.run({"x": x})[[o.name for o in m.get_outputs()].index("accs")], out["accs"])
