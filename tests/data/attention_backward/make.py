#!/usr/bin/env python3
"""Makes the reference data of tests/test_attention_backward.cpp with PyTorch autograd
(run: /tmp/venv/bin/python tests/data/attention_backward/make.py).

Attention as ONNX Attention (opset 23) computes it: softmax(scale Q K^T + mask, causal: j <= i) V per head (q head h
reads kv head h // (Hq / Hkv)), in float64 (torch 1.13 has no F.scaled_dot_product_attention; this is its math),
then autograd of sum(dO * Y). Per case: <case>.{q,k,v,do,y,dq,dk,dv}.npy (f32), and
<case>.mask.npy when the case has a mask (f32 additive or bool). Layouts: "3d" Q [B, S, Hq*D], K/V [B, S, Hkv*D];
"4d" [B, H, S, D]. The cases (name: B, Sq, Skv, Hq, Hkv, D, Dv, layout, causal, mask, scale):
"""
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))

CASES = [
    # name         B  Sq  Skv Hq Hkv D   Dv  layout causal mask       scale
    ("s1_d16",     1, 1,  1,  2, 2,  16, 16, "4d", False, None,      None),
    ("s7_causal",  3, 7,  7,  2, 2,  24, 24, "3d", True,  None,      None),
    ("s33_d64",    1, 33, 33, 2, 2,  64, 64, "3d", True,  None,      None),
    ("add_mask",   3, 7,  9,  2, 2,  16, 24, "4d", False, "additive", 0.3),
    ("bool_mask",  1, 33, 33, 3, 3,  24, 24, "4d", False, "bool",    None),
    ("gqa",        3, 7,  7,  4, 2,  16, 16, "3d", True,  None,      None),
    ("short_mask", 1, 7,  9,  2, 2,  16, 16, "3d", False, "short",   None),
]


def attention(q, k, v, hq, hkv, causal, mask, scale):  # [B, H, S, D] float64
    g = hq // hkv
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = scale * q @ k.transpose(-1, -2)
    sq, skv = s.shape[-2], s.shape[-1]
    if mask is not None:
        if mask.dtype == torch.bool:
            s = s.masked_fill(~mask, float("-inf"))
        else:
            s = s + mask
    if causal:
        keep = torch.ones(sq, skv, dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def main():
    rng = np.random.default_rng(0)
    for name, B, Sq, Skv, Hq, Hkv, D, Dv, layout, causal, mask_kind, scale in CASES:
        q = rng.standard_normal((B, Hq, Sq, D))
        k = rng.standard_normal((B, Hkv, Skv, D))
        v = rng.standard_normal((B, Hkv, Skv, Dv))
        do = rng.standard_normal((B, Hq, Sq, Dv))
        mask = None
        mask_file = None
        if mask_kind == "additive":  # [Sq, Skv] broadcast over batch and heads, some -inf
            m = rng.uniform(-2, 2, (Sq, Skv))
            m[rng.uniform(size=(Sq, Skv)) < 0.2] = -np.inf
            m[:, 0] = 0.0  # every row keeps a key
            mask_file = m.astype(np.float32)
            mask = torch.from_numpy(mask_file.astype(np.float64))
        elif mask_kind == "bool":  # [B, 1, Sq, Skv]
            m = rng.uniform(size=(B, 1, Sq, Skv)) > 0.3
            m[..., 5] = True
            mask_file = m
            mask = torch.from_numpy(m)
        elif mask_kind == "short":  # [Sq, Skv - 2] f32: the last two keys masked (ONNX pads with -inf)
            m = rng.uniform(-1, 1, (Sq, Skv - 2)).astype(np.float32)
            mask_file = m
            full = np.concatenate([m.astype(np.float64), np.full((Sq, 2), -np.inf)], axis=1)
            mask = torch.from_numpy(full)
        eff = scale if scale is not None else 1.0 / np.sqrt(D)
        # f32 values, computed in float64
        t = [torch.tensor(a.astype(np.float32).astype(np.float64), requires_grad=True) for a in (q, k, v)]
        dot = torch.from_numpy(do.astype(np.float32).astype(np.float64))
        y = attention(*t, Hq, Hkv, causal, mask, float(np.float32(eff)))
        (y * dot).sum().backward()

        def lay(a):  # [B, H, S, D] -> the case's layout
            a = a.detach().numpy().astype(np.float32)
            return a if layout == "4d" else np.ascontiguousarray(a.transpose(0, 2, 1, 3)).reshape(a.shape[0], a.shape[2], -1)

        out = {"q": lay(t[0]), "k": lay(t[1]), "v": lay(t[2]), "do": lay(dot), "y": lay(y),
               "dq": lay(t[0].grad), "dk": lay(t[1].grad), "dv": lay(t[2].grad)}
        if mask_file is not None:
            out["mask"] = mask_file
        for key, a in out.items():
            np.save(os.path.join(HERE, f"{name}.{key}.npy"), a)


if __name__ == "__main__":
    main()
