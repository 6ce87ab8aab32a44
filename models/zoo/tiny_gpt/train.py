#!/usr/bin/python3
"""Trains a small character-level decoder-only Transformer on the King James Bible and exports it with a
fixed-size KV cache for token-by-token generation.

Model: token embedding + learned positions (MAX_POS), LAYERS pre-norm blocks (LayerNorm, causal
self-attention with HEADS heads, LayerNorm, GELU feed-forward), final LayerNorm, linear head.

Data: /usr/lib/bible.data of Debian package bible-kjv-text, read with the `bible` program of package
bible-kjv (`bible -l10000 gen1:1-rev22:21`): one verse per line, verse numbers and chapter headings
dropped. The last 2% of the verses are held out for the validation loss (as models/zoo/char_lstm).

Exported graph (model.onnx, ai.onnx opset 23):
  inputs  tokens int64 [B,T]; pos int64 [1] (position of tokens[:,0]);
          k<l>_in / v<l>_in f32 [B,MAX_POS,DIM] per layer l (the KV cache, zeros at the start)
  outputs logits f32 [B,T,V]; k<l>_out / v<l>_out (the cache with positions pos..pos+T-1 written)
  metadata_props: max_positions = MAX_POS.
The cache update is Gather (new K/V rows picked by slot - pos, clamped) + Where (slots pos..pos+T-1);
attention is one ONNX Attention node (opset 23) over the whole cache with a bool mask
slot <= pos + i, so a decode step reads the cache once and never recomputes the prefix. GELU is the
ONNX Gelu op (opset 20). torch 1.13 exports at most opset 17, so both come from custom symbolics and
the file's opset import is raised to 23 afterwards by rewriting the ModelProto (finish_model below).

Writes beside this script: model.onnx, vocab.json, ref_tokens.npy + ref_logits.npy (PyTorch's logits
for a fixed input at pos 0) and reference.json (greedy continuation of a fixed prompt by full
recompute, validation loss, training settings). The trained weights go to --checkpoint (outside git);
--export-only re-exports from it without training.
Run with Debian's python3-torch: /usr/bin/python3 models/zoo/tiny_gpt/train.py
"""
import argparse
import io
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.onnx import register_custom_op_symbolic, symbolic_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import kjv  # noqa: E402  (models/zoo/kjv.py: the text and its split)
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
SEED = 0
LAYERS, DIM, HEADS, FFN, MAX_POS = 2, 128, 4, 512, 128
BATCH, STEPS, LR, WARMUP = 32, 600, 2e-3, 50
PROMPT = "In the beginning"
GREEDY_TOKENS = 100
REF_TEXT = "In the beginning God created the heaven and the earth.\nAnd the"
DATA = ("bible -l10000 gen1:1-rev22:21 (bible-kjv, /usr/lib/bible.data of bible-kjv-text), "
        "one verse a line, last 2% held out")


def attend(q, k, v, mask):
    """q [B,T,C], k/v [B,S,C], mask bool [T,S] (True = may attend) -> [B,T,C]."""
    B, T, C = q.shape
    S, D = k.shape[1], C // HEADS
    qh = q.reshape(B, T, HEADS, D).transpose(1, 2)
    kh = k.reshape(B, S, HEADS, D).transpose(1, 2)
    vh = v.reshape(B, S, HEADS, D).transpose(1, 2)
    s = (qh @ kh.transpose(-1, -2)) * (1.0 / math.sqrt(D))
    s = s.masked_fill(~mask, float("-inf"))
    return (s.softmax(-1) @ vh).transpose(1, 2).reshape(B, T, C)


class OnnxAttention(torch.autograd.Function):
    """attend() in PyTorch; one ONNX Attention node (3-D Q/K/V, default scale 1/sqrt(D)) in the export."""

    @staticmethod
    def forward(ctx, q, k, v, mask):
        return attend(q, k, v, mask)

    @staticmethod
    def symbolic(g, q, k, v, mask):
        out = g.op("Attention", q, k, v, mask, q_num_heads_i=HEADS, kv_num_heads_i=HEADS)
        out.setType(q.type())
        return out


@symbolic_helper.parse_args("v", "s")
def gelu_symbolic(g, x, approximate):
    return g.op("Gelu", x, approximate_s=approximate)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(DIM)
        self.qkv = torch.nn.Linear(DIM, 3 * DIM)
        self.proj = torch.nn.Linear(DIM, DIM)
        self.ln2 = torch.nn.LayerNorm(DIM)
        self.fc1 = torch.nn.Linear(DIM, FFN)
        self.fc2 = torch.nn.Linear(FFN, DIM)

    def mlp(self, x):
        return self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGpt(torch.nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, DIM)
        self.pos = torch.nn.Embedding(MAX_POS, DIM)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = torch.nn.LayerNorm(DIM)
        self.head = torch.nn.Linear(DIM, vocab)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)
            elif name.endswith(".bias"):
                torch.nn.init.zeros_(p)

    def forward(self, tokens):
        """Full recompute from position 0 with a causal mask (training, references)."""
        T = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(T))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        for b in self.blocks:
            q, k, v = b.qkv(b.ln1(x)).split(DIM, -1)
            x = x + b.proj(attend(q, k, v, mask))
            x = x + b.mlp(x)
        return self.head(self.ln_f(x))


class CachedGpt(torch.nn.Module):
    """The export form: tokens at positions pos..pos+T-1 against fixed [B, MAX_POS, DIM] K/V caches."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, tokens, pos, *caches):
        m = self.m
        B, T = tokens.shape
        r = torch.arange(T)
        p = pos + r                                       # [T] positions of the new tokens
        slots = torch.arange(MAX_POS)
        write = ((slots >= pos) & (slots < pos + T)).unsqueeze(1)                       # [M,1]
        src = torch.maximum(torch.minimum(slots - pos, r[-1:]), torch.zeros(1, dtype=torch.int64))  # [M]
        allowed = slots.unsqueeze(0) <= p.unsqueeze(1)    # [T,M]: slot j visible to token i
        # Rows are [B*T, DIM] so every Linear exports as one Gemm with its bias (a 3-D input would give
        # MatMul + Add); only the cache update and attention see [B, T, DIM] (reshapes are views).
        x = (m.tok(tokens) + m.pos(p)).reshape(-1, DIM)
        new_caches = []
        for i, b in enumerate(m.blocks):
            q, k, v = (t.reshape(B, T, DIM) for t in b.qkv(b.ln1(x)).split(DIM, -1))
            kc = torch.where(write, k.index_select(1, src), caches[2 * i])
            vc = torch.where(write, v.index_select(1, src), caches[2 * i + 1])
            new_caches += [kc, vc]
            x = x + b.proj(OnnxAttention.apply(q, kc, vc, allowed).reshape(-1, DIM))
            x = x + b.mlp(x)
        return (m.head(m.ln_f(x)).reshape(B, T, -1), *new_caches)


def cache_names():
    names = []
    for i in range(LAYERS):
        names += [f"k{i}", f"v{i}"]
    return names


def zero_caches(batch):
    return [torch.zeros(batch, MAX_POS, DIM) for _ in range(2 * LAYERS)]


def greedy(model, ids, n):
    """Greedy continuation by full recompute over the whole context each step."""
    ctx = list(ids)
    out, margins = [], []
    with torch.no_grad():
        for _ in range(n):
            last = model(torch.tensor([ctx]))[0, -1]
            top = torch.topk(last, 2).values
            margins.append(float(top[0] - top[1]))
            nxt = int(last.argmax())
            out.append(nxt)
            ctx.append(nxt)
    return out, min(margins)


# --- ModelProto rewriting without the onnx package (not in Debian's python3 here) -------------------

def _varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def _enc_varint(v):
    out = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        if v:
            out.append(c | 0x80)
        else:
            out.append(c)
            return bytes(out)


def _fields(b):
    """(field number, wire type, raw value bytes or int) of one protobuf message."""
    i, out = 0, []
    while i < len(b):
        key, i = _varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = _varint(b, i)
        elif w == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"protobuf wire type {w} not expected in an ONNX model")
        out.append((f, w, v))
    return out


def _emit(f, w, v):
    key = _enc_varint((f << 3) | w)
    if w == 0:
        return key + _enc_varint(v)
    if w == 2:
        return key + _enc_varint(len(v)) + bytes(v)
    return key + bytes(v)


def _string_field(msg, f):
    return next((bytes(v).decode() for ff, w, v in _fields(msg) if ff == f and w == 2), "")


def finish_model(raw, metadata):
    """Raises the ai.onnx opset import to 23 (IR version 11), adds metadata_props, and checks that every
    node is an ai.onnx op this export is meant to produce."""
    allowed = {"Gather", "Add", "Sub", "Mul", "Div", "MatMul", "Gemm", "LayerNormalization", "Split", "Where", "Attention",
               "Gelu", "Range", "Shape", "Slice", "Unsqueeze", "Max", "Min", "Less", "GreaterOrEqual", "LessOrEqual",
               "And", "Constant", "Cast", "Reshape", "Squeeze", "Concat", "ConstantOfShape"}
    out = bytearray()
    for f, w, v in _fields(raw):
        if f == 1 and w == 0:  # ir_version
            v = 11
        elif f == 8:  # opset_import
            if _string_field(v, 1) == "":
                v = _emit(2, 0, 23)
            else:
                raise ValueError(f"unexpected opset import of domain {_string_field(v, 1)!r}")
        elif f == 7:  # graph: check the nodes
            for gf, gw, gv in _fields(v):
                if gf == 1:
                    op, dom = _string_field(gv, 4), _string_field(gv, 7)
                    if dom or op not in allowed:
                        raise ValueError(f"export produced an unexpected node {dom}::{op}")
        out += _emit(f, w, v)
    for key, value in metadata.items():
        out += _emit(14, 2, _emit(1, 2, key.encode()) + _emit(2, 2, str(value).encode()))
    return bytes(out)


def export(model, vocab_size, path):
    register_custom_op_symbolic("aten::gelu", gelu_symbolic, 17)
    cached = CachedGpt(model).eval()
    tokens = torch.zeros(1, 5, dtype=torch.int64)
    args = (tokens, torch.zeros(1, dtype=torch.int64), *zero_caches(1))
    names = cache_names()
    dyn = {"tokens": {0: "B", 1: "T"}, "logits": {0: "B", 1: "T"}}
    for n in names:
        dyn[n + "_in"] = {0: "B"}
        dyn[n + "_out"] = {0: "B"}
    buf = io.BytesIO()
    # Attention / Gelu are not ai.onnx ops at opset 17, so torch's checker must not run (it would refuse
    # them); finish_model checks the node types instead and raises the opset.
    torch.onnx.export(cached, args, buf, input_names=["tokens", "pos"] + [n + "_in" for n in names],
                      output_names=["logits"] + [n + "_out" for n in names], dynamic_axes=dyn, opset_version=17,
                      do_constant_folding=True, keep_initializers_as_inputs=False,
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    raw = finish_model(buf.getvalue(), {"max_positions": MAX_POS, "vocab_size": vocab_size})
    with open(path, "wb") as f:
        f.write(raw)
    return len(raw)


def check_cache_equals_full(model, ids):
    """The export form run in PyTorch: a prefill then one token a step must match the full recompute."""
    with torch.no_grad():
        full = model(torch.tensor([ids]))
        cached = CachedGpt(model)
        caches = zero_caches(1)
        split = len(ids) // 2
        outs = cached(torch.tensor([ids[:split]]), torch.tensor([0]), *caches)
        got, caches = [outs[0]], list(outs[1:])
        for t in range(split, len(ids)):
            outs = cached(torch.tensor([[ids[t]]]), torch.tensor([t]), *caches)
            got.append(outs[0])
            caches = list(outs[1:])
        err = float((torch.cat(got, 1) - full).abs().max())
    if err > 1e-4:
        raise SystemExit(f"cached forward differs from the full recompute by {err}")
    return err


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--checkpoint", default=os.path.join(REPO, "build", "zoo", "tiny_gpt.pt"),
                    help="where the trained weights go (kept outside git)")
    ap.add_argument("--export-only", action="store_true", help="re-export from --checkpoint, no training")
    args = ap.parse_args()

    torch.manual_seed(SEED)
    np.random.seed(SEED)
    torch.set_num_threads(1)
    chars, train, val = kjv.char_split()
    index = {ch: i for i, ch in enumerate(chars)}

    model = TinyGpt(len(chars))
    print(f"{sum(p.numel() for p in model.parameters())} parameters")
    if args.export_only:
        ck = torch.load(args.checkpoint)
        model.load_state_dict(ck["model"])
        train_s, steps = ck["train_seconds"], ck["steps"]
        recipe = ck.get("recipe")  # train_cldl.py's checkpoints: how cldl train trained them
    else:
        recipe = None
        opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.99), weight_decay=0.01)
        steps = args.steps
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / WARMUP) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
        train_s = kjv.fit(lambda x, y: F.cross_entropy(model(x).reshape(-1, len(chars)), y.reshape(-1)), opt, sched,
                          model.parameters(), train, MAX_POS, BATCH, steps)
        os.makedirs(os.path.dirname(args.checkpoint), exist_ok=True)
        torch.save({"model": model.state_dict(), "train_seconds": round(train_s), "steps": steps}, args.checkpoint)
        print(f"checkpoint: {args.checkpoint}")

    model.eval()
    with torch.no_grad():  # validation loss over the held-out verses, in windows of MAX_POS from position 0
        n = (len(val) - 1) // MAX_POS * MAX_POS
        x = val[:n].reshape(-1, MAX_POS)
        y = val[1:n + 1].reshape(-1, MAX_POS)
        val_loss = sum(float(F.cross_entropy(model(x[i:i + 32]).reshape(-1, len(chars)), y[i:i + 32].reshape(-1),
                                             reduction="sum")) for i in range(0, x.shape[0], 32)) / y.numel()
    print(f"validation loss {val_loss:.3f} (nats/char), trained in {train_s:.0f} s")

    prompt_ids = [index[ch] for ch in PROMPT]
    tokens, margin = greedy(model, prompt_ids, GREEDY_TOKENS)
    text = "".join(chars[t] for t in tokens)
    print(f"greedy: {PROMPT!r} -> {text!r} (smallest top-2 logit margin {margin:.4f})")
    err = check_cache_equals_full(model, prompt_ids + tokens)
    print(f"PyTorch: cached decode vs full recompute max abs diff {err:.2e}")

    ref_tokens = torch.tensor([[index[ch] for ch in REF_TEXT]])
    with torch.no_grad():
        logits = model(ref_tokens)
    np.save(os.path.join(HERE, "ref_tokens.npy"), ref_tokens.numpy())
    np.save(os.path.join(HERE, "ref_logits.npy"), logits.numpy())
    size = export(model, len(chars), os.path.join(HERE, "model.onnx"))
    print(f"model.onnx: {size} bytes")
    with open(os.path.join(HERE, "vocab.json"), "w") as f:
        json.dump({"chars": chars}, f, ensure_ascii=True)
        f.write("\n")
    ref = {"prompt": PROMPT, "greedy_tokens": tokens, "greedy_text": text, "greedy_min_margin": margin,
           "val_loss": val_loss, "layers": LAYERS, "dim": DIM, "heads": HEADS, "ffn": FFN, "max_positions": MAX_POS,
           "batch": BATCH, "steps": steps, "lr": LR, "seed": SEED, "torch": torch.__version__,
           "train_seconds": train_s, "data": DATA}
    if recipe:
        ref.update(recipe)
        ref["steps"] = steps
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
