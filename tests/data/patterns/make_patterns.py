#!/usr/bin/python3
"""Makes the ONNX files of tests/test_onnx_patterns.cpp: small PyTorch modules whose ONNX export is the
decomposed form of LayerNorm (opset 14), RMSNorm, GELU (erf form in both Mul orders, tanh form) and attention
(MatMul(Q, K^T) -> Div / Mul scale -> optional additive mask / causal Where -> Softmax -> MatMul V), SiLU
(x * Sigmoid(x)) after convolutions and a Linear, AvgPool2d's zero Pad, BatchNorm after a concatenation, nn.MultiheadAttention (torchvision's ViT), plus PyTorch's outputs on fixed inputs as .npy. Run with Debian's python3-torch (1.13):
    /usr/bin/python3 tests/data/patterns/make_patterns.py [NAME ...]   (only those files)
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)


class LayerNormModel(nn.Module):
    def __init__(self, shape, affine=True):
        super().__init__()
        self.ln = nn.LayerNorm(shape, eps=1e-5, elementwise_affine=affine)
        if affine:
            with torch.no_grad():
                self.ln.weight.uniform_(0.5, 1.5)
                self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.ln(x) * 2.0


class RMSNormModel(nn.Module):
    """RMSNorm as LLaMA / T5 code writes it: x * rsqrt(mean(x^2) + eps) * weight, or x / sqrt(...)."""

    def __init__(self, dim, form="rsqrt"):
        super().__init__()
        self.form = form
        self.weight = nn.Parameter(torch.empty(dim).uniform_(0.5, 1.5))

    def forward(self, x):
        v = x.pow(2).mean(-1, keepdim=True) + 1e-6
        y = x * torch.rsqrt(v) if self.form == "rsqrt" else x / torch.sqrt(v)
        return self.weight * y if self.form == "rsqrt" else y * self.weight


class GeluModel(nn.Module):
    """Linear -> GELU in one of three spellings -> Linear."""

    def __init__(self, form):
        super().__init__()
        self.form = form
        self.fc1 = nn.Linear(12, 20)
        self.fc2 = nn.Linear(20, 7)

    def forward(self, x):
        h = self.fc1(x)
        if self.form == "erf":  # PyTorch's own export: x * (1 + erf(x / sqrt2)) * 0.5
            h = F.gelu(h)
        elif self.form == "erf_half_first":  # 0.5 * x first, then * (1 + erf(...))
            h = (h * 0.5) * (1.0 + torch.erf(h / math.sqrt(2.0)))
        else:  # tanh approximation
            h = F.gelu(h, approximate="tanh")
        return self.fc2(h)


class AttentionModel(nn.Module):
    """Multi-head self-attention written out the way models do before SDPA existed."""

    def __init__(self, d_model=24, heads=3, mode="plain", max_len=16):
        super().__init__()
        self.h, self.d, self.mode = heads, d_model // heads, mode
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.register_buffer("tril", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))

    def forward(self, x, mask=None):
        B, S, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, S, self.h, self.d).transpose(1, 2)
        k = k.view(B, S, self.h, self.d).transpose(1, 2)
        v = v.view(B, S, self.h, self.d).transpose(1, 2)
        if self.mode == "mul_scale":
            att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.d))
        else:
            att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d)
        if self.mode == "causal":
            att = att.masked_fill(self.tril[:, :, :S, :S] == 0, float("-inf"))
        if mask is not None:
            att = att + mask
        att = F.softmax(att, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(B, S, C)
        return self.out(y)


class MhaModel(nn.Module):
    """nn.MultiheadAttention as torchvision's ViT encoder calls it (batch_first, need_weights=False): the export
    transposes to [L, N, E], cuts the packed in-projection with three Slices of the last axis, splits heads as
    [L, N*H, D] -> [N*H, L, D], divides Q by sqrt(D), and merges the heads back before out_proj (a Gemm)."""

    def __init__(self, d_model=24, heads=3):
        super().__init__()
        self.a = nn.MultiheadAttention(d_model, heads, batch_first=True)
        with torch.no_grad():
            self.a.in_proj_bias.uniform_(-0.5, 0.5)
            self.a.out_proj.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.a(x, x, x, need_weights=False)[0] * 2.0


class SiluModel(nn.Module):
    """nn.SiLU after a Conv (its epilogue takes it), after a Linear, and once where the Conv output has a
    third reader (the pattern must stay)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 5, 3, padding=1)
        self.c2 = nn.Conv2d(5, 5, 1)
        self.fc = nn.Linear(7, 6)
        self.act = nn.SiLU()

    def forward(self, x):
        h = self.act(self.c1(x))
        z = self.c2(h)
        h = self.act(z) + z
        return self.act(self.fc(h))


class HardswishModel(nn.Module):
    """nn.Hardswish, which torch exports before opset 14 as x * HardSigmoid(x, alpha=1/6): after a Conv (its
    epilogue takes it), once where the Conv output has a third reader (the pattern must stay), written out as
    F.hardsigmoid(u) * u (the same function), and after a Linear."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 6, 3, padding=1, stride=2)
        self.c2 = nn.Conv2d(6, 5, 1)
        self.c3 = nn.Conv2d(5, 4, 1)
        self.fc = nn.Linear(4, 9)
        self.act = nn.Hardswish()

    def forward(self, x):
        h = self.act(self.c1(x))
        z = self.c2(h)
        u = self.c3(self.act(z) + z)
        return self.act(self.fc(F.hardsigmoid(u) * u))


class Relu6Model(nn.Module):
    """nn.ReLU6 (Clip(x, 0, 6): Constant bounds from opset 11, attributes before) after a Conv and after a
    Linear (their epilogues take it), once where the Conv output has another reader (the Clip must stay), and
    a clamp with a lower bound only after a Conv (taken, the upper bound +inf)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 7, 3, padding=1, stride=2)
        self.c2 = nn.Conv2d(7, 5, 1)
        self.c3 = nn.Conv2d(5, 5, 1)
        self.fc = nn.Linear(5, 6)
        self.act = nn.ReLU6()

    def forward(self, x):
        h = self.act(self.c1(x))
        z = self.c2(h)
        u = torch.clamp(self.c3(self.act(z) - z), min=-1.5)
        return self.act(self.fc(u))


class AvgPoolModel(nn.Module):
    """nn.AvgPool2d(2, 2), which torch 1.13 exports at opset 11+ as Pad (all pads 0) -> AveragePool (DenseNet's
    transition pools)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(2, stride=2)

    def forward(self, x):
        return self.pool(x * 2.0)


class BnAfterConcatModel(nn.Module):
    """DenseNet's pre-activation: BatchNorm (eval, random statistics) -> ReLU after a concatenation, which no
    convolution can take in."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(7)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return torch.relu(self.bn(torch.cat([x, self.conv(x)], 1)))


ONLY = sys.argv[1:]  # names to (re)make; all when empty


def export(name, model, inputs, opset, input_names):
    if ONLY and name not in ONLY:
        return
    model.eval()
    with torch.no_grad():
        y = model(*inputs)
    path = os.path.join(HERE, name + ".onnx")
    torch.onnx.export(model, tuple(inputs), path, opset_version=opset, input_names=input_names,
                      output_names=["y"], do_constant_folding=True)
    for n, t in zip(input_names, inputs):
        np.save(os.path.join(HERE, f"{name}.{n}.npy"), t.numpy())
    np.save(os.path.join(HERE, f"{name}.y.npy"), y.numpy())


def main():
    g = torch.Generator().manual_seed(1)
    rnd = lambda *s: torch.randn(*s, generator=g)
    export("layernorm", LayerNormModel(10), [rnd(2, 3, 10) * 3 + 1], 14, ["x"])
    export("layernorm2d_noaffine", LayerNormModel((4, 6), affine=False), [rnd(3, 4, 6)], 13, ["x"])
    for form in ("erf", "erf_half_first", "tanh"):
        export("gelu_" + form, GeluModel(form), [rnd(5, 12)], 14, ["x"])
    export("attention", AttentionModel(), [rnd(2, 7, 24)], 14, ["x"])
    export("attention_mulscale", AttentionModel(mode="mul_scale"), [rnd(1, 5, 24)], 14, ["x"])
    export("attention_causal", AttentionModel(mode="causal"), [rnd(2, 9, 24)], 14, ["x"])
    mask = torch.where(torch.rand(2, 1, 1, 6, generator=g) < 0.3, -1e4, 0.0)
    export("attention_mask", AttentionModel(), [rnd(2, 6, 24), mask], 14, ["x", "mask"])
    export("rmsnorm", RMSNormModel(11), [rnd(2, 3, 11) * 2], 14, ["x"])
    export("rmsnorm_div", RMSNormModel(9, form="div"), [rnd(4, 9)], 17, ["x"])
    export("silu", SiluModel(), [rnd(2, 3, 5, 7) * 2], 13, ["x"])
    export("avgpool_pad", AvgPoolModel(), [rnd(1, 3, 6, 9)], 13, ["x"])
    export("bn_concat", BnAfterConcatModel(), [rnd(2, 3, 5, 6)], 13, ["x"])
    export("hardswish", HardswishModel(), [rnd(1, 3, 9, 8) * 3], 13, ["x"])
    relu6_x = rnd(1, 3, 11, 10) * 4
    export("relu6", Relu6Model(), [relu6_x], 13, ["x"])
    export("relu6_opset9", Relu6Model(), [relu6_x], 9, ["x"])
    export("mha", MhaModel(), [rnd(2, 7, 24)], 13, ["x"])
    export("mha_batch1", MhaModel(30, 5), [rnd(1, 11, 30)], 13, ["x"])


if __name__ == "__main__":
    main()
