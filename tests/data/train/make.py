#!/usr/bin/env python3
"""Makes the reference data of tests/test_train.cpp with PyTorch (run: /tmp/venv/bin/python tests/data/train/make.py).

model.onnx: Conv 3x3 1->3 pad 1, ReLU, MaxPool 2, Flatten, Linear 18->4 on [N, 1, 5, 6], PyTorch's initialisation
(seed 0), batch symbolic. x.npy [7, 1, 5, 6], y.npy int64 [7] (classes), t.npy f32 [7, 4] (mse targets). Two epochs
in batches of 3 (3, 3, 1; no shuffling) for each case; <case>_losses.npy holds its 6 step losses and
<case>.<initializer>.npy the weights after them:
  sgd_nesterov   cross entropy, SGD lr 0.1, momentum 0.9, Nesterov
  adam           cross entropy, Adam lr 0.01 with the ONNX Adam op's epsilon placement (see
                 tools/bench/train_vs_torch.py: epsilon added to sqrt(v) before the bias correction)
  mse_sgd        mean squared error against t, SGD lr 0.05, momentum 0.5, weight decay 0.01
and bn_cases (below): the same with BatchNorm2d and Dropout in training mode, and schedule_cases (below): the
learning-rate schedule and gradient clipping (`make.py schedule` makes only those, from model.onnx's weights).
"""
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 3, 3, padding=1)
        self.fc = torch.nn.Linear(18, 4)

    def forward(self, x):
        return self.fc(torch.flatten(torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2), 1))


def onnx_adam_step(params, state, t, lr, b1=0.9, b2=0.999, eps=1e-8):
    r = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    for p in params:
        m, v = state.setdefault(p, (torch.zeros_like(p), torch.zeros_like(p)))
        m.mul_(b1).add_((1 - b1) * p.grad)
        v.mul_(b2).add_((1 - b2) * p.grad * p.grad)
        p.sub_(r * m / (v.sqrt() + eps))


def main():
    torch.manual_seed(0)
    init = Tiny()
    x = torch.rand(7, 1, 5, 6) * 2 - 1
    y = torch.tensor([0, 3, 1, 2, 3, 0, 1], dtype=torch.int64)
    t = torch.rand(7, 4)
    torch.onnx.export(init, x[:1], os.path.join(HERE, "model.onnx"), input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}}, opset_version=17)
    np.save(os.path.join(HERE, "x.npy"), x.numpy())
    np.save(os.path.join(HERE, "y.npy"), y.numpy())
    np.save(os.path.join(HERE, "t.npy"), t.numpy())
    for case in ["sgd_nesterov", "adam", "mse_sgd"]:
        m = Tiny()
        m.load_state_dict(init.state_dict())
        opt = {"sgd_nesterov": lambda: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True),
               "mse_sgd": lambda: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.5, weight_decay=0.01),
               "adam": lambda: None}[case]()
        state, step, losses = {}, 0, []
        for _ in range(2):
            for i in range(0, 7, 3):
                for p in m.parameters():
                    p.grad = None
                out = m(x[i:i + 3])
                if case == "mse_sgd":
                    loss = torch.mean((out - t[i:i + 3]) ** 2)
                else:
                    loss = torch.nn.functional.cross_entropy(out, y[i:i + 3])
                loss.backward()
                step += 1
                if opt is None:
                    with torch.no_grad():
                        onnx_adam_step(list(m.parameters()), state, step, 0.01)
                else:
                    opt.step()
                losses.append(loss.item())
        np.save(os.path.join(HERE, f"{case}_losses.npy"), np.array(losses, dtype=np.float32))
        for name, p in m.state_dict().items():
            np.save(os.path.join(HERE, f"{case}.{name}.npy"), p.numpy())


class TinyBn(torch.nn.Module):
    """Conv 3x3 1->3 pad 1, BatchNorm2d, ReLU, MaxPool 2, Flatten, Dropout(p), Linear 18->4."""

    def __init__(self, p):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 3, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(3)
        self.drop = torch.nn.Dropout(p)
        self.fc = torch.nn.Linear(18, 4)

    def forward(self, x):
        h = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(self.drop(torch.flatten(h, 1)))


def export_inference(model, x, path):
    """The inference ONNX file that keeps BatchNormalization and Dropout: tools/bench/train_vs_torch.py's."""
    sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools", "bench"))
    import train_vs_torch
    train_vs_torch.export_inference(model, x, path, "x", "logits")


def bn_cases():
    """model_bn.onnx (Dropout p = 0) and model_bn_drop.onnx (p = 0.5): TinyBn with PyTorch's initialisation (seed 1);
    bn_sgd: two epochs of batches 3, 3, 1 on x / y in training mode (batch statistics), SGD lr 0.1 momentum 0.9:
    bn_sgd_losses.npy and bn_sgd.<name>.npy for the weights and BN's running_mean / running_var after them."""
    torch.manual_seed(1)
    init = TinyBn(0.0)
    x = torch.from_numpy(np.load(os.path.join(HERE, "x.npy")))
    y = torch.from_numpy(np.load(os.path.join(HERE, "y.npy")))
    export_inference(init, x[:2], os.path.join(HERE, "model_bn.onnx"))  # the export's forward moves the stats
    drop = TinyBn(0.5)
    drop.load_state_dict(init.state_dict())
    export_inference(drop, x[:2], os.path.join(HERE, "model_bn_drop.onnx"))
    m = TinyBn(0.0)
    m.load_state_dict(init.state_dict())
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(2):
        for i in range(0, 7, 3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(x[i:i + 3]), y[i:i + 3])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    np.save(os.path.join(HERE, "bn_sgd_losses.npy"), np.array(losses, dtype=np.float32))
    for name, p in m.state_dict().items():
        if p.dtype == torch.float32:
            np.save(os.path.join(HERE, f"bn_sgd.{name}.npy"), p.numpy())


def schedule_lr(lr, step, warmup, total, min_lr):
    """cldl's lr_at (models/train.hpp): warm-up, then a cosine from lr to min_lr over total steps."""
    cos = min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * min(step, total) / total))
    return cos * min(1.0, (step + 1) / warmup)


def schedule_cases():
    """Tiny with model.onnx's weights, two epochs of batches 3, 3, 1 as main()'s, the rate per step from
    schedule_lr(warmup 2, total 6, min_lr lr / 10) and the gradients clipped to a global norm (clip_grad_norm_)
    before each step; prints the norms so the data shows both clipped and unclipped steps:
      sgd_cosine_clip    cross entropy, SGD lr 0.2, momentum 0.9, clip 0.6
      adam_cosine_clip   cross entropy, Adam (ONNX epsilon placement) lr 0.02, clip 0.6"""
    import onnx
    import onnx.numpy_helper
    init = {t.name: torch.from_numpy(onnx.numpy_helper.to_array(t).copy())
            for t in onnx.load(os.path.join(HERE, "model.onnx")).graph.initializer}
    x = torch.from_numpy(np.load(os.path.join(HERE, "x.npy")))
    y = torch.from_numpy(np.load(os.path.join(HERE, "y.npy")))
    for case, lr in [("sgd_cosine_clip", 0.2), ("adam_cosine_clip", 0.02)]:
        m = Tiny()
        m.load_state_dict(init)
        opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9) if case.startswith("sgd") else None
        state, step, losses, norms = {}, 0, [], []
        for _ in range(2):
            for i in range(0, 7, 3):
                for p in m.parameters():
                    p.grad = None
                loss = torch.nn.functional.cross_entropy(m(x[i:i + 3]), y[i:i + 3])
                loss.backward()
                norms.append(float(torch.nn.utils.clip_grad_norm_(m.parameters(), 0.6)))
                rate = schedule_lr(lr, step, 2, 6, lr / 10)
                step += 1
                with torch.no_grad():
                    if opt is None:
                        onnx_adam_step(list(m.parameters()), state, step, rate)
                    else:
                        opt.param_groups[0]["lr"] = rate
                        opt.step()
                losses.append(loss.item())
        print(case, "gradient norms before clipping", " ".join(f"{n:.3f}" for n in norms))
        np.save(os.path.join(HERE, f"{case}_losses.npy"), np.array(losses, dtype=np.float32))
        for name, p in m.state_dict().items():
            np.save(os.path.join(HERE, f"{case}.{name}.npy"), p.numpy())


if __name__ == "__main__":
    if sys.argv[1:] == ["schedule"]:
        schedule_cases()
    else:
        main()
        bn_cases()
        schedule_cases()
