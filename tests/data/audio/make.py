#!/usr/bin/python3
"""A log-mel spectrogram front end as speech models compute it (HannWindow, STFT, |X|^2, MelWeightMatrix,
MatMul, Log) at opset 17, and ONNX Runtime's outputs for a few signals: the reference tests/test_audio.cpp
compares cldl with. PyTorch 1.13's exporter has no aten::stft at opset 17 (it came with 2.0), so the graph
is written with onnx.helper. Run from the repository root with a Python that has onnx and onnxruntime:
    /tmp/venv/bin/python tests/data/audio/make.py
Writes tests/data/audio/logmel.onnx and logmel/<k>_<name>.npy (inputs and ORT's outputs of case k)."""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))


def scalar(name, value, dtype=np.int64):
    return helper.make_tensor(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [], [value])


def logmel_model(n_fft=400, hop=160, n_mels=40, sample_rate=16000):
    """Whisper-style: 25 ms frames (n_fft 400) every 10 ms (hop 160) at 16 kHz, 40 mel bins up to 8 kHz."""
    inits = [
        scalar("n_fft", n_fft), scalar("hop", hop), scalar("n_mels", n_mels), scalar("rate", sample_rate),
        scalar("lo", 0.0, np.float32), scalar("hi", sample_rate / 2, np.float32), scalar("eps", 1e-6, np.float32),
        helper.make_tensor("last", TensorProto.INT64, [1], [-1]),
    ]
    nodes = [
        helper.make_node("Unsqueeze", ["audio", "last"], ["signal"]),  # [batch, samples, 1]
        helper.make_node("HannWindow", ["n_fft"], ["window"]),  # periodic
        helper.make_node("STFT", ["signal", "hop", "window"], ["spec"]),  # [batch, frames, bins, 2], one-sided
        helper.make_node("Mul", ["spec", "spec"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "last"], ["power"], keepdims=0),  # [batch, frames, bins]
        helper.make_node("MelWeightMatrix", ["n_mels", "n_fft", "rate", "lo", "hi"], ["mel"]),  # [bins, n_mels]
        helper.make_node("MatMul", ["power", "mel"], ["mel_power"]),
        helper.make_node("Add", ["mel_power", "eps"], ["shifted"]),
        helper.make_node("Log", ["shifted"], ["logmel"]),
    ]
    graph = helper.make_graph(
        nodes, "logmel",
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", "samples"])],
        [helper.make_tensor_value_info("logmel", TensorProto.FLOAT, ["batch", "frames", n_mels])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="cldl tests")
    onnx.checker.check_model(model)
    return model


def main():
    path = os.path.join(HERE, "logmel.onnx")
    onnx.save(logmel_model(), path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    out_dir = os.path.join(HERE, "logmel")
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    for k, (b, n) in enumerate([(1, 400), (2, 4000), (1, 3201)]):
        t = np.arange(n, dtype=np.float32) / 16000
        audio = (0.3 * np.sin(2 * np.pi * 440 * t) + 0.1 * rng.standard_normal((b, n))).astype(np.float32)
        (y,) = sess.run(None, {"audio": audio})
        print(f"case {k}: audio {audio.shape} -> logmel {y.shape}, range [{y.min():.2f}, {y.max():.2f}]")
        np.save(os.path.join(out_dir, f"{k}_audio.npy"), audio)
        np.save(os.path.join(out_dir, f"{k}_logmel.npy"), y)


if __name__ == "__main__":
    main()
