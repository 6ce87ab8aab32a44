#!/usr/bin/python3
"""Trains the digits CNN (conv, batchnorm, pooling, dense) on sklearn's 8x8 digits and exports it.

Writes beside this script: model.onnx (input `image` f32 [N,1,8,8] scaled to [0,1], output `logits`
[N,10]), x_test.npy / y_test.npy (the held-out split), ref_logits.npy (PyTorch's logits for x_test) and
reference.json (accuracy PyTorch measured, training settings).
Run with Debian's python3-torch and python3-sklearn: /usr/bin/python3 models/zoo/digits_cnn/train.py
"""
import json
import os
import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 0
EPOCHS = 30


class DigitsCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),  # 8x8 -> 4x4
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),  # 4x4 -> 2x2
        )
        self.classifier = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(32 * 2 * 2, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def forward(self, image):
        return self.classifier(self.features(image))


def data():
    """(x_train, x_test, y_train, y_test): sklearn's digits, images / 16 as [N, 1, 8, 8], the stratified split."""
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.25, random_state=SEED, stratify=y)


def write_outputs(model, x_test, y_test, settings, out=HERE):
    """Writes the held-out split, PyTorch's logits of `model` for it, model.onnx and reference.json (the accuracy
    and `settings`, how it was trained) to `out`; returns the accuracy."""
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(x_test)).numpy()
    pred = logits.argmax(1)
    correct = int((pred == y_test).sum())
    accuracy = correct / len(y_test)
    print(f"test accuracy {accuracy:.4f} ({correct}/{len(y_test)})")

    np.save(os.path.join(out, "x_test.npy"), x_test)
    np.save(os.path.join(out, "y_test.npy"), y_test)
    np.save(os.path.join(out, "ref_logits.npy"), logits.astype(np.float32))
    torch.onnx.export(model, torch.from_numpy(x_test[:1]), os.path.join(out, "model.onnx"),
                      input_names=["image"], output_names=["logits"], dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}},
                      opset_version=17, do_constant_folding=True)
    ref = {"accuracy": accuracy, "correct": correct, "count": int(len(y_test)), "torch": torch.__version__,
           "data": "sklearn.datasets.load_digits, images/16, train_test_split(test_size=0.25, random_state=0, stratify)"}
    ref.update(settings)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    return accuracy


def main():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    torch.set_num_threads(1)
    x_train, x_test, y_train, y_test = data()

    model = DigitsCnn()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    t0 = time.time()
    for epoch in range(EPOCHS):
        model.train()
        perm = torch.randperm(len(xt))
        total = 0.0
        for i in range(0, len(xt), 32):
            idx = perm[i:i + 32]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        print(f"epoch {epoch + 1}: train loss {total / len(xt):.4f}")
    train_s = time.time() - t0

    write_outputs(model, x_test, y_test, {"epochs": EPOCHS, "seed": SEED, "train_seconds": round(train_s, 1)})


if __name__ == "__main__":
    main()
