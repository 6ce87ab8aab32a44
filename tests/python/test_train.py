"""cldl.Trainer / cldl.train (python/cldl_module.cpp over models/train.hpp) against PyTorch.

The tiny CNN of tests/data/train (Conv, ReLU, MaxPool, Flatten, Gemm; exported by PyTorch with its
initialisation): the step losses and weights PyTorch reached there (tests/data/train/make.py), and, where torch
imports (Debian's python3-torch), the same network trained live by PyTorch from the Trainer's initial weights:
every step's loss within 1e-5 + 1e-4 relative. Also the saved model, numpy conversions, errors as cldl.Error with
cldl's message, and two PoCL devices (data parallel) giving one device's losses.
"""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import cldl
from conftest import DEVICE, ROOT

DATA = os.path.join(ROOT, "tests", "data", "train")
MODEL = os.path.join(DATA, "model.onnx")


def load(name):
    return np.load(os.path.join(DATA, name))


def close(got, want, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    err = np.abs(got - want)
    bad = err > 1e-5 + 1e-4 * np.abs(want)
    assert not bad.any(), "{}: cldl {} PyTorch {}".format(what, got[bad][:4], want[bad][:4])


def torch_matches(torch, t, m, opt, x, y, batch, epochs, what):
    """`epochs` passes of PyTorch's model m with optimizer opt over x, y in batches in order, and of the Trainer t:
    every step's loss and the final weights close; returns the Trainer's step losses. x and y go to the Trainer as
    given (float64 / int32 included: it converts them), to PyTorch as float32 / int64."""
    xt, yt = torch.from_numpy(np.asarray(x, np.float32)), torch.from_numpy(np.asarray(y, np.int64))
    want = []
    for _ in range(epochs):
        for i in range(0, len(x), batch):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(xt[i:i + batch]), yt[i:i + batch])
            loss.backward()
            opt.step()
            want.append(loss.item())
    got = np.concatenate([t.epoch(x, y)["losses"] for _ in range(epochs)])
    close(got, want, what)
    for name, v in t.weights().items():
        close(v, m.state_dict()[name].numpy(), name)
    return got


def test_trainer_matches_pytorch_reference_data():
    x, y = load("x.npy"), load("y.npy")
    t = cldl.Trainer(MODEL, loss="cross_entropy", optimizer="sgd", lr=0.1, momentum=0.9, nesterov=True, batch=3,
                     shuffle=False, devices=DEVICE)
    assert t.devices and t.steps == 0
    losses = []
    for _ in range(2):
        r = t.epoch(x, y)
        assert set(r) == {"losses", "mean_loss", "seconds"}
        assert r["losses"].dtype == np.float32 and r["losses"].shape == (3,)
        # The epoch's loss is the mean over its samples: batches 3, 3, 1.
        assert abs(r["mean_loss"] - float(np.dot(r["losses"], [3, 3, 1])) / 7) < 1e-6
        losses += list(r["losses"])
    assert t.steps == 6
    close(losses, load("sgd_nesterov_losses.npy"), "step losses")
    w = t.weights()
    assert list(w) == ["conv.weight", "conv.bias", "fc.weight", "fc.bias"] or set(w) == {
        "conv.weight", "conv.bias", "fc.weight", "fc.bias"}
    for name, v in w.items():
        assert v.dtype == np.float32
        close(v, load("sgd_nesterov.{}.npy".format(name)), name)


def test_adam_and_mse_match_pytorch_reference_data():
    x = load("x.npy")
    t = cldl.Trainer(MODEL, optimizer="adam", lr=0.01, batch=3, shuffle=False, devices=DEVICE)
    close([t.step(x[i:i + 3], load("y.npy")[i:i + 3]) for e in range(2) for i in range(0, 7, 3)],
          load("adam_losses.npy"), "adam step losses")
    # mse with float64 targets (numpy's default) and weight decay.
    t = cldl.Trainer(MODEL, loss="mse", lr=0.05, momentum=0.5, weight_decay=0.01, batch=3, shuffle=False,
                     devices=DEVICE)
    losses = np.concatenate([t.epoch(x, load("t.npy").astype(np.float64))["losses"] for _ in range(2)])
    close(losses, load("mse_sgd_losses.npy"), "mse step losses")
    for name, v in t.weights().items():
        close(v, load("mse_sgd.{}.npy".format(name)), name)


def test_cosine_schedule_and_clipping_match_pytorch_reference_data():
    t = cldl.Trainer(MODEL, optimizer="adam", lr=0.02, batch=3, shuffle=False, devices=DEVICE, schedule="cosine",
                     warmup=2, total_steps=6, min_lr=0.002, clip_norm=0.6)
    losses = np.concatenate([t.epoch(load("x.npy"), load("y.npy"))["losses"] for _ in range(2)])
    close(losses, load("adam_cosine_clip_losses.npy"), "adam step losses")
    for name, v in t.weights().items():
        close(v, load("adam_cosine_clip.{}.npy".format(name)), name)
    with pytest.raises(cldl.Error, match="needs total_steps"):
        cldl.Trainer(MODEL, schedule="cosine", devices=DEVICE)
    # cldl.train counts the cosine's steps itself: 2 epochs of 3 batches, as above.
    history = cldl.train(MODEL, load("x.npy"), load("y.npy"), epochs=2, optimizer="adam", lr=0.02, batch=3,
                         shuffle=False, devices=DEVICE, schedule="cosine", warmup=2, min_lr=0.002, clip_norm=0.6)
    close(np.concatenate([h["losses"] for h in history]), load("adam_cosine_clip_losses.npy"), "cldl.train losses")


def test_live_pytorch_from_the_trainers_initial_weights():
    torch = pytest.importorskip("torch", reason="PyTorch is not importable here (Debian: python3-torch)")
    try:
        torch.from_numpy(np.zeros(1, np.float32))
    except RuntimeError as e:  # Debian's torch (NumPy 1.x) in a venv with NumPy 2 from PyPI (python_wheel)
        pytest.skip("this PyTorch cannot read this NumPy's arrays ({})".format(e))
    spec = importlib.util.spec_from_file_location("cldl_train_data_make", os.path.join(DATA, "make.py"))
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    Tiny = make.Tiny  # the network tests/data/train/make.py exported

    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (11, 1, 5, 6))  # float64: converted to float32
    y = rng.integers(0, 4, 11).astype(np.int32)  # int32 class ids: widened to int64
    t = cldl.Trainer(MODEL, lr=0.05, momentum=0.9, batch=4, shuffle=False, devices=DEVICE)
    m = Tiny()
    m.load_state_dict({k: torch.from_numpy(v) for k, v in t.weights().items()})
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    torch_matches(torch, t, m, opt, x, y, 4, 3, "step losses")  # batches 4, 4, 3


def test_adamw_matches_pytorch_and_the_cli(tmp_path):
    """optimizer="adamw" (the options parser cldl train uses): PyTorch's decoupled weight decay with the ONNX Adam
    op's epsilon placement (tools/bench/train_vs_torch.py's OnnxAdam), from the Trainer's initial weights; and the
    same losses as `cldl train --optimizer adamw`."""
    torch = pytest.importorskip("torch", reason="PyTorch is not importable here (Debian: python3-torch)")
    try:
        torch.from_numpy(np.zeros(1, np.float32))
    except RuntimeError as e:
        pytest.skip("this PyTorch cannot read this NumPy's arrays ({})".format(e))
    mods = {}
    for name, path in (("make", os.path.join(DATA, "make.py")),
                       ("bench", os.path.join(ROOT, "tools", "bench", "train_vs_torch.py"))):
        spec = importlib.util.spec_from_file_location("cldl_adamw_" + name, path)
        mods[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mods[name])
    x, y = load("x.npy"), load("y.npy")
    t = cldl.Trainer(MODEL, optimizer="adamw", lr=0.01, weight_decay=0.05, batch=3, shuffle=False, devices=DEVICE)
    m = mods["make"].Tiny()
    m.load_state_dict({k: torch.from_numpy(v) for k, v in t.weights().items()})
    opt = mods["bench"].OnnxAdam(m.parameters(), 0.01, decoupled=0.05)
    got = torch_matches(torch, t, m, opt, x, y, 3, 2, "adamw step losses")
    cli = os.path.join(ROOT, "build", "cldl")
    if os.path.exists(cli):
        import json
        r = subprocess.run([cli, "train", MODEL, "--input", os.path.join(DATA, "x.npy"), "--labels",
                            os.path.join(DATA, "y.npy"), "--optimizer", "adamw", "--lr", "0.01", "--weight-decay",
                            "0.05", "--batch", "3", "--no-shuffle", "--epochs", "2", "--json", "--out",
                            str(tmp_path / "w.onnx")] + (["--device", DEVICE] if DEVICE else []),
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        steps = [v for e in json.loads(r.stdout)["epochs"] for v in e["step_losses"]]
        np.testing.assert_allclose(steps, got, rtol=1e-6, atol=1e-7)


def test_train_saves_a_model_that_runs(tmp_path):
    x, y = load("x.npy"), load("y.npy")
    out = str(tmp_path / "trained.onnx")
    history = cldl.train(MODEL, x, y, epochs=3, out=out, lr=0.1, batch=3, shuffle=False, devices=DEVICE)
    assert len(history) == 3 and history[-1]["mean_loss"] < history[0]["mean_loss"]
    t = cldl.Trainer(out, batch=3, devices=DEVICE)  # the trained weights, read back from the file
    sess = cldl.load(out, device=DEVICE)
    logits = sess.run(None, {"x": x})[0]
    assert logits.shape == (7, 4) and np.isfinite(logits).all()
    # The saved weights are the trained ones: a fresh Trainer on the file starts from them.
    ref = cldl.Trainer(MODEL, lr=0.1, batch=3, shuffle=False, devices=DEVICE)
    for _ in range(3):
        ref.epoch(x, y)
    for name, v in ref.weights().items():
        np.testing.assert_array_equal(t.weights()[name], v)


def test_errors_are_cldl_errors_with_the_message():
    with pytest.raises(cldl.Error, match="loss 'hinge' is not one of cross_entropy, mse"):
        cldl.Trainer(MODEL, loss="hinge", devices=DEVICE)
    with pytest.raises(cldl.Error, match="optimizer 'rmsprop' is not one of sgd, adam, adamw"):
        cldl.Trainer(MODEL, optimizer="rmsprop", devices=DEVICE)
    with pytest.raises(cldl.Error, match="momentum must not be negative, got -0.5"):
        cldl.Trainer(MODEL, momentum=-0.5, devices=DEVICE)
    with pytest.raises(cldl.Error, match="weight_decay must not be negative"):
        cldl.Trainer(MODEL, weight_decay=-1.0, devices=DEVICE)
    with pytest.raises(cldl.Error, match="the batch axis must not be negative, got -1"):
        cldl.Trainer(MODEL, batch_axis=-1, devices=DEVICE)
    with pytest.raises(cldl.Error, match="the model has no input 'nope'"):
        cldl.Trainer(MODEL, input="nope", devices=DEVICE)
    with pytest.raises(cldl.Error, match="the batch must be at least 1"):
        cldl.Trainer(MODEL, batch=0, devices=DEVICE)
    with pytest.raises(cldl.Error, match="the learning rate must be positive"):
        cldl.Trainer(MODEL, lr=-1.0, devices=DEVICE)
    with pytest.raises(cldl.Error, match="no OpenCL device matches"):
        cldl.Trainer(MODEL, devices=["cpu:0", "cpu:99"])
    with pytest.raises(cldl.Error, match="parallel 'layers' splits the model's LSTM / GRU layers over the devices"):
        cldl.Trainer(MODEL, parallel="layers", devices=DEVICE)
    with pytest.raises(cldl.Error, match="parallel 'rows' is not one of data, layers"):
        cldl.Trainer(MODEL, parallel="rows", devices=DEVICE)
    t = cldl.Trainer(MODEL, batch=3, devices=DEVICE)
    with pytest.raises(cldl.Error, match="the labels are f32; cross_entropy takes i64"):
        t.step(load("x.npy"), load("t.npy"))
    with pytest.raises(cldl.Error, match="the data has 7 samples along axis 0, the labels 2"):
        t.epoch(load("x.npy"), load("y.npy")[:2])
    assert np.isfinite(t.step(load("x.npy")[:2], load("y.npy")[:2]))  # still usable


def test_layer_parallel_lstm_in_time_chunks_trains_as_whole():
    # tests/data/train/rnn_lstm.onnx (one LSTM layer over 5 steps), its forward and backward in 2 time chunks
    # (3 + 2 steps): the losses and weights of the whole layer (test_train_layers.cpp has the stacks, the plans and
    # two devices).
    model, x, y = os.path.join(DATA, "rnn_lstm.onnx"), load("rnn_x.npy"), load("rnn_y.npy")
    runs = []
    for kw in ({}, {"parallel": "layers", "time_chunks": 2}):
        t = cldl.Trainer(model, lr=0.2, batch=3, shuffle=False, devices=DEVICE, **kw)
        runs.append((np.concatenate([t.epoch(x, y)["losses"] for _ in range(2)]), t.weights()))
    (la, wa), (lb, wb) = runs
    assert len(la) == 6
    assert np.allclose(lb, la, rtol=1e-5, atol=1e-6), (la, lb)
    for k in wa:
        assert np.allclose(wb[k], wa[k], rtol=1e-5, atol=1e-6), k


_TWO_DEVICES = r"""
import sys, numpy as np, cldl
model, x, y = sys.argv[1], np.load(sys.argv[2]), np.load(sys.argv[3])
runs = []
for devices in (["cpu:0"], ["cpu:0", "cpu:1"]):
    t = cldl.Trainer(model, lr=0.1, nesterov=True, batch=3, seed=1, devices=devices)
    assert len(t.devices) == len(devices), t.devices
    losses = np.concatenate([t.epoch(x, y)["losses"] for _ in range(2)])
    runs.append((losses, t.weights()))
(la, wa), (lb, wb) = runs
assert np.allclose(lb, la, rtol=1e-5, atol=1e-7), (la, lb)
for k in wa:
    assert np.allclose(wb[k], wa[k], rtol=1e-5, atol=1e-7), k
print("ok", len(la))
"""


def test_two_pocl_devices_train_as_one():
    if not any("Portable" in d["platform"] or "pocl" in d["platform"].lower() for d in cldl.devices()):
        pytest.skip("two devices in one context come from PoCL (POCL_DEVICES); this machine has no PoCL")
    env = dict(os.environ, POCL_DEVICES="pthread pthread")
    env.pop("CLDL_DEVICE", None)
    r = subprocess.run([sys.executable, "-c", _TWO_DEVICES, MODEL, os.path.join(DATA, "x.npy"),
                        os.path.join(DATA, "y.npy")], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok 6" in r.stdout
