#!/usr/bin/env python3
"""Makes the LSTM / GRU reference data of tests/test_rnn_backward.cpp with PyTorch
(run: /tmp/venv/bin/python tests/data/train/make_rnn.py).

rnn_lstm.onnx: LSTM 3->7 (batch_first) on [N, 5, 3], its last hidden state -> Linear 7->4.
rnn_gru.onnx:  GRU 3->7 (batch_first) on [N, 5, 3], the mean of its outputs over time -> Linear 7->4.
PyTorch's initialisation (seed 0), batch symbolic, exported by torch.onnx (opset 14: LSTM / GRU with W, R, B in
ONNX's gate order, zero initial states as ConstantOfShape); the recurrent initializers are renamed rnn.W, rnn.R,
rnn.B. rnn_x.npy [7, 5, 3], rnn_y.npy int64 [7]. Two epochs in batches of 3 (3, 3, 1; no shuffling), cross entropy;
<case>_losses.npy holds the 6 step losses and <case>.<initializer>.npy the weights after them (the trained
PyTorch model exported the same way):
  rnn_lstm_sgd   rnn_lstm.onnx, SGD lr 0.2, momentum 0.9
  rnn_gru_adam   rnn_gru.onnx, Adam lr 0.02 with the ONNX Adam op's epsilon placement (as make.py)
"""
import os
import tempfile

import numpy as np
import onnx
import torch

from make import onnx_adam_step

HERE = os.path.dirname(os.path.abspath(__file__))


class Classifier(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell
        self.rnn = getattr(torch.nn, cell)(3, 7, batch_first=True)
        self.fc = torch.nn.Linear(7, 4)

    def forward(self, x):
        y, h = self.rnn(x)
        if self.cell == "LSTM":
            return self.fc(h[0].squeeze(0))
        return self.fc(y.mean(1))


def export(model, path):
    """torch.onnx.export, then the LSTM / GRU initializers renamed rnn.W, rnn.R, rnn.B; returns the model."""
    torch.onnx.export(model, torch.zeros(1, 5, 3), path, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}}, opset_version=14)
    m = onnx.load(path)
    rename = {}
    for n in m.graph.node:
        if n.op_type in ("LSTM", "GRU"):
            for k, name in zip(range(1, 4), "WRB"):
                rename[n.input[k]] = "rnn." + name
    for t in m.graph.initializer:
        t.name = rename.get(t.name, t.name)
    for n in m.graph.node:
        for k, v in enumerate(n.input):
            n.input[k] = rename.get(v, v)
    onnx.save(m, path)
    return m


def main():
    torch.manual_seed(0)
    x = torch.rand(7, 5, 3) * 2 - 1
    y = torch.tensor([0, 3, 1, 2, 3, 0, 1], dtype=torch.int64)
    np.save(os.path.join(HERE, "rnn_x.npy"), x.numpy())
    np.save(os.path.join(HERE, "rnn_y.npy"), y.numpy())
    for case, cell in [("rnn_lstm_sgd", "LSTM"), ("rnn_gru_adam", "GRU")]:
        m = Classifier(cell)
        export(m, os.path.join(HERE, f"rnn_{cell.lower()}.onnx"))
        opt = torch.optim.SGD(m.parameters(), lr=0.2, momentum=0.9) if cell == "LSTM" else None
        state, step, losses = {}, 0, []
        for _ in range(2):
            for i in range(0, 7, 3):
                for p in m.parameters():
                    p.grad = None
                loss = torch.nn.functional.cross_entropy(m(x[i:i + 3]), y[i:i + 3])
                loss.backward()
                step += 1
                if opt is None:
                    with torch.no_grad():
                        onnx_adam_step(list(m.parameters()), state, step, 0.02)
                else:
                    opt.step()
                losses.append(loss.item())
        np.save(os.path.join(HERE, f"{case}_losses.npy"), np.array(losses, dtype=np.float32))
        with tempfile.TemporaryDirectory() as d:
            trained = export(m, os.path.join(d, "trained.onnx"))
        for t in trained.graph.initializer:
            if t.data_type == onnx.TensorProto.FLOAT and (t.name.startswith("rnn.") or t.name.startswith("fc.")):
                np.save(os.path.join(HERE, f"{case}.{t.name}.npy"), onnx.numpy_helper.to_array(t))


if __name__ == "__main__":
    main()
