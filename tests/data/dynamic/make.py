#!/usr/bin/python3
"""Models with dynamic input dims for tests/test_dynamic.cpp, exported with Debian's python3-torch (random
weights, seeded), and ONNX Runtime's outputs for random shapes of each (the reference the test compares
with). Run from the repository root with a Python that has torch (Debian's) and onnxruntime (PyPI), e.g.
    /usr/bin/python3 -m venv --system-site-packages /tmp/venv && /tmp/venv/bin/pip install onnxruntime "numpy<2"
    /tmp/venv/bin/python tests/data/dynamic/make.py
Writes tests/data/dynamic/<model>.onnx and <model>/<k>_<name>.npy (inputs and ORT's outputs of case k)."""
import math
import os
import sys
from typing import List

import numpy as np
import onnxruntime as ort
import torch
import torchvision
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


class SelfAttention(nn.Module):
    """Hugging Face BERT's layout: query/key/value Linear, heads split by view + permute, scores scaled by
    1/sqrt(head size), an additive mask, softmax, context back to [B, S, H], output dense + LayerNorm."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_size = heads, hidden // heads
        self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.dense = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def split(self, x):
        b, s, _ = x.size()
        return x.view(b, s, self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size) + mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        ctx = ctx.view(ctx.size(0), ctx.size(1), -1)
        return self.norm(self.dense(ctx) + x)


class Layer(nn.Module):
    def __init__(self, hidden, heads, inter):
        super().__init__()
        self.attn = SelfAttention(hidden, heads)
        self.inter, self.out = nn.Linear(hidden, inter), nn.Linear(inter, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, mask):
        x = self.attn(x, mask)
        return self.norm(self.out(nn.functional.gelu(self.inter(x))) + x)


class Encoder(nn.Module):
    def __init__(self, vocab=100, hidden=32, heads=4, inter=64, layers=2, max_pos=64):
        super().__init__()
        self.words, self.pos, self.types = nn.Embedding(vocab, hidden), nn.Embedding(max_pos, hidden), nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(Layer(hidden, heads, inter) for _ in range(layers))

    def forward(self, input_ids, attention_mask):
        s = input_ids.size(1)
        pos = torch.arange(s, dtype=torch.long).unsqueeze(0)
        x = self.norm(self.words(input_ids) + self.pos(pos) + self.types(torch.zeros_like(input_ids)))
        mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        return x


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(16, 5)

    def forward(self, image):
        return self.head(torch.flatten(self.body(image), 1))


class Scripted(nn.Module):
    """torch.jit.script control flow: a for over a dim (exported as Loop) and an if on a dim (If)."""

    def forward(self, x):
        acc = torch.zeros_like(x[0])
        for i in range(x.size(0)):
            acc = acc * 0.5 + x[i]
        if x.size(1) > 3:
            y = torch.relu(acc)
        else:
            y = -acc
        return y, acc


class ListAppend(nn.Module):
    """A scripted list built in a for loop (SequenceEmpty, SequenceInsert in a Loop body), then stacked and
    concatenated (ConcatFromSequence with and without new_axis)."""

    def forward(self, x):
        outs: List[torch.Tensor] = []
        for i in range(x.size(0)):
            outs.append(x[i] * float(i + 1))
        return torch.stack(outs, 0), torch.cat(outs, 0)


class While(nn.Module):
    """A `while` on a value computed from the data (a Loop whose condition needs run-time data)."""

    def forward(self, x):
        acc = x
        while bool(acc.sum() < 10.0):
            acc = acc * 1.5 + 1.0
        return acc


class Detect(nn.Module):
    """Boxes and scores computed from the input, torchvision's nms (NonMaxSuppression) and torch.nonzero
    (NonZero): output shapes decided by the data, the results gathered downstream."""

    def forward(self, feats):  # [n, 6]
        xy = feats[:, :2] * 20.0
        wh = torch.exp(feats[:, 2:4]) * 4.0
        boxes = torch.cat([xy, xy + wh], 1)
        scores = torch.sigmoid(feats[:, 4])
        keep = torchvision.ops.nms(boxes, scores, 0.45)
        strong = torch.nonzero(feats[:, 5] > 1.0).squeeze(1)
        return boxes[keep], scores[keep] * 2.0, keep, feats[strong].sum(0)


def export(model, args, names, outputs, dynamic, path, opset):
    model.eval()
    torch.onnx.export(model, args, path, input_names=names, output_names=outputs, dynamic_axes=dynamic,
                      opset_version=opset, do_constant_folding=True)


def cases(name, path, make_inputs, count, seed):
    rng = np.random.default_rng(seed)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    folder = os.path.join(HERE, name)
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):
        os.remove(os.path.join(folder, f))
    for k in range(count):
        feed = make_inputs(rng)
        outs = sess.run(None, feed)
        for n, v in feed.items():
            np.save(os.path.join(folder, f"{k}_{n}.npy"), v)
        for o, v in zip(sess.get_outputs(), outs):
            np.save(os.path.join(folder, f"{k}_{o.name}.npy"), v)


def detection():
    path = os.path.join(HERE, "detect.onnx")
    export(Detect(), (torch.randn(50, 6),), ["feats"], ["boxes", "scores", "keep", "strong_sum"],
           {"feats": {0: "n"}, "boxes": {0: "kept"}, "scores": {0: "kept"}, "keep": {0: "kept"}}, path, 11)

    def detect_inputs(rng):
        n = int(rng.choice([1, 37, 5000, 6000]))
        f = rng.standard_normal((n, 6)).astype(np.float32)
        # Scores apart by far more than an ulp (ties, or a sigmoid an ulp off, would reorder the kept boxes).
        f[:, 4] = rng.permutation(np.linspace(-4.0, 4.0, n)).astype(np.float32)
        if rng.integers(0, 3) == 0:
            f[:, 5] = -5.0  # nothing strong: nonzero counts 0
        return {"feats": f}

    cases("detect", path, detect_inputs, 8, 31)


def main():
    if sys.argv[1:] == ["detect"]:  # only the detection export (keeps the others' bytes)
        detection()
        return
    torch.manual_seed(0)
    enc = Encoder()
    ids = torch.randint(0, 100, (2, 7))
    for opset in (11, 14):
        name = f"bert_opset{opset}"
        path = os.path.join(HERE, name + ".onnx")
        export(enc, (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"], ["last_hidden_state"],
               {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                "last_hidden_state": {0: "batch", 1: "sequence"}}, path, opset)

        def bert_inputs(rng):
            b, s = int(rng.integers(1, 5)), int(rng.integers(1, 41))
            mask = np.ones((b, s), np.int64)
            for i in range(b):  # padded rows: the tail masked out
                mask[i, int(rng.integers(1, s + 1)):] = 0
            return {"input_ids": rng.integers(0, 100, (b, s)).astype(np.int64), "attention_mask": mask}

        cases(name, path, bert_inputs, 20, opset)

    torch.manual_seed(1)
    cnn = Cnn()
    with torch.no_grad():  # BatchNorm statistics that are not the identity
        cnn.body[1].running_mean.uniform_(-0.5, 0.5)
        cnn.body[1].running_var.uniform_(0.5, 1.5)
    path = os.path.join(HERE, "cnn.onnx")
    export(cnn, (torch.randn(1, 3, 32, 32),), ["image"], ["logits"],
           {"image": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}}, path, 13)

    def cnn_inputs(rng):
        b, h, w = int(rng.integers(1, 4)), int(rng.integers(8, 50)), int(rng.integers(8, 50))
        return {"image": rng.standard_normal((b, 3, h, w)).astype(np.float32)}

    cases("cnn", path, cnn_inputs, 8, 5)

    scripted = torch.jit.script(Scripted())
    for opset in (11, 13):
        name = f"scripted_opset{opset}"
        path = os.path.join(HERE, name + ".onnx")
        torch.onnx.export(scripted, (torch.randn(4, 5),), path, input_names=["x"], output_names=["y", "acc"],
                          dynamic_axes={"x": {0: "steps", 1: "width"}}, opset_version=opset)

        def scripted_inputs(rng):
            return {"x": rng.standard_normal((int(rng.integers(1, 9)), int(rng.integers(1, 7)))).astype(np.float32)}

        cases(name, path, scripted_inputs, 8, opset)

    path = os.path.join(HERE, "list_append.onnx")
    torch.onnx.export(torch.jit.script(ListAppend()), (torch.randn(3, 4),), path, input_names=["x"],
                      output_names=["stacked", "cat"], dynamic_axes={"x": {0: "n", 1: "w"}}, opset_version=13)
    cases("list_append", path,
          lambda rng: {"x": rng.standard_normal((int(rng.integers(1, 7)), int(rng.integers(1, 6)))).astype(np.float32)}, 6, 17)

    path = os.path.join(HERE, "while.onnx")
    torch.onnx.export(torch.jit.script(While()), (torch.randn(3),), path, input_names=["x"], output_names=["acc"],
                      dynamic_axes={"x": {0: "n"}}, opset_version=13)
    cases("while", path, lambda rng: {"x": rng.standard_normal(int(rng.integers(1, 6))).astype(np.float32)}, 6, 13)


if __name__ == "__main__":
    main()
