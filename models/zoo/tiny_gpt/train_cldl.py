#!/usr/bin/env python3
"""Trains tiny_gpt with `cldl train` instead of PyTorch and writes the trained weights into a copy of the
generation model (the KV-cache form that `cldl generate` runs). It never touches this folder's model.onnx.

1. The network of train.py (TinyGpt, seed --seed) is exported in its training form: full sequences of --seq
   tokens, no KV cache, tokens int64 [B, T] -> logits [B, T, V], each block's attention one ONNX Attention node
   with is_causal 1 (training_export; opset 23, IR 11, written with the onnx package), the QKV projection split by
   Slice, torch's shared equal initializers (the LayerNorms' ones and zeros) given back one per parameter.
2. --windows random windows of --seq + 1 characters of the training text (the KJV's first 98 % of verses through
   `bible`, as train.py, or --text) are the data; `cldl train` runs AdamW (--lr, weight decay 0.01; the ONNX Adam
   epsilon placement; --warmup steps, --cosine down to --min-lr, --clip-norm as cldl train has them) for --epochs epochs of
   --batch, shuffled from --seed.
3. write_generation_model copies every trained initializer into the generation model (--model, default this
   folder's model.onnx) by name: both exports name the parameters m.<module>.<param>; where the generation export
   shares an initializer between equal parameters through an Identity node, the node is replaced by the
   parameter's own initializer. The result goes to --out, vocab.json beside it (`cldl generate` reads it).
4. With --eval, the held-out loss (nats/char) of both the initial and the trained model, through ONNX Runtime on
   windows of --seq of the held-out text.

Needs torch (train.py's recipe), onnx and numpy; onnxruntime for --eval:
  /tmp/venv/bin/python models/zoo/tiny_gpt/train_cldl.py --out build/zoo/tiny_gpt_cldl.onnx [--text FILE]
"""
import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
import train as gpt  # noqa: E402  (TinyGpt, attend, gelu_symbolic, the sizes)


class CausalAttention(torch.autograd.Function):
    """gpt.attend with the causal mask in PyTorch; one ONNX Attention node with is_causal 1 in the export."""

    @staticmethod
    def forward(ctx, q, k, v):
        T = q.shape[1]
        return gpt.attend(q, k, v, torch.ones(T, T, dtype=torch.bool).tril())

    @staticmethod
    def symbolic(g, q, k, v):
        out = g.op("Attention", q, k, v, q_num_heads_i=gpt.HEADS, kv_num_heads_i=gpt.HEADS, is_causal_i=1)
        out.setType(q.type())
        return out


class TrainGpt(torch.nn.Module):
    """TinyGpt.forward (full recompute from position 0) in the training export's form; export=False runs the
    same math in PyTorch (gpt.attend)."""

    def __init__(self, model, export):
        super().__init__()
        self.m, self.export = model, export

    def forward(self, tokens):
        m, D = self.m, gpt.DIM
        T = tokens.shape[1]
        x = (m.tok(tokens) + m.pos(torch.arange(T))).reshape(-1, D)
        for b in m.blocks:
            qkv = b.qkv(b.ln1(x))
            q, k, v = (qkv[:, i * D:(i + 1) * D].reshape(-1, T, D) for i in range(3))
            if self.export:
                a = CausalAttention.apply(q, k, v)
            else:
                a = gpt.attend(q, k, v, torch.ones(T, T, dtype=torch.bool).tril())
            x = x + b.proj(a.reshape(-1, D))
            x = x + b.mlp(x)
        return m.head(m.ln_f(x)).reshape(-1, T, m.head.out_features)


def unshare(proto):
    """torch.onnx shares equal initializers through Identity nodes; each parameter gets its own again."""
    inits = {t.name: t for t in proto.graph.initializer}
    for node in list(proto.graph.node):
        if node.op_type == "Identity" and node.input[0] in inits:
            copy = onnx.TensorProto()
            copy.CopyFrom(inits[node.input[0]])
            copy.name = node.output[0]
            proto.graph.initializer.append(copy)
            proto.graph.node.remove(node)


def training_export(model, seq, path):
    """Writes the training form of `model` for windows of `seq` tokens (batch symbolic) to `path`."""
    torch.onnx.register_custom_op_symbolic("aten::gelu", gpt.gelu_symbolic, 17)
    buf = io.BytesIO()
    torch.onnx.export(TrainGpt(model, True).eval(), torch.zeros(1, seq, dtype=torch.int64), buf, input_names=["tokens"],
                      output_names=["logits"], dynamic_axes={"tokens": {0: "B"}, "logits": {0: "B"}},
                      opset_version=17, do_constant_folding=True, keep_initializers_as_inputs=False,
                      operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    proto = onnx.load_from_string(buf.getvalue())  # Attention and Gelu are ai.onnx ops from opset 23 / 20 on
    proto.ir_version = 11
    for o in proto.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = 23
    unshare(proto)
    onnx.save(proto, path)


def write_generation_model(trained_path, model_path, out_path):
    """Copies the trained initializers of trained_path into the generation model model_path -> out_path."""
    trained = {t.name: t for t in onnx.load(trained_path).graph.initializer}
    gen = onnx.load(model_path)
    unshare(gen)
    have = {t.name for t in gen.graph.initializer}
    missing = sorted(n for n in trained if n not in have)
    if missing:
        raise SystemExit(f"the generation model has no initializer {missing[0]} (and {len(missing) - 1} more)")
    for t in gen.graph.initializer:
        if t.name in trained:
            t.CopyFrom(trained[t.name])
    onnx.save(gen, out_path)


def write_checkpoint(trained_path, model, args, seconds, path):
    """train.py's checkpoint of `model` (a gpt.TinyGpt) holding the weights of trained_path (named m.<key> by the
    training export), with the recipe that trained them (train.py --export-only records it in reference.json)."""
    import onnx.numpy_helper
    trained = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(trained_path).graph.initializer}
    state = model.state_dict()
    for key in state:
        if "m." + key not in trained:
            raise SystemExit(f"the trained model has no initializer m.{key}")
        state[key] = torch.from_numpy(trained["m." + key].copy())
    steps = args.epochs * ((args.windows + args.batch - 1) // args.batch)
    recipe = {"trainer": "cldl train", "optimizer": "adamw", "weight_decay": 0.01, "lr": args.lr,
              "schedule": "cosine" if args.cosine else "constant", "warmup": args.warmup, "min_lr": args.min_lr,
              "clip_norm": args.clip_norm, "windows": args.windows, "seq": args.seq, "epochs": args.epochs,
              "batch": args.batch, "seed": args.seed}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save({"model": state, "train_seconds": seconds, "steps": steps, "recipe": recipe}, path)
    print(f"checkpoint: {path}")


def texts(args):
    if args.text:
        text = open(args.text).read()
        split = int(len(text) * 0.98)
        return text[:split], text[split:]
    sys.path.insert(0, os.path.dirname(HERE))
    import kjv
    verses = kjv.load_verses()
    split = int(len(verses) * 0.98)
    return "\n".join(verses[:split]) + "\n", "\n".join(verses[split:]) + "\n"


def held_out_loss(path, ids, seq):
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    n = (len(ids) - 1) // seq
    x = np.stack([ids[k * seq:(k + 1) * seq] for k in range(n)])
    y = np.stack([ids[k * seq + 1:(k + 1) * seq + 1] for k in range(n)])
    total = 0.0
    for i in range(0, n, 16):
        logits = sess.run(None, {"tokens": x[i:i + 16]})[0].astype(np.float64)
        logits -= logits.max(-1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        total -= np.take_along_axis(logp, y[i:i + 16, :, None], -1).sum()
    return total / y.size


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cldl", default=os.path.join(ROOT, "build", "cldl"))
    ap.add_argument("--model", default=os.path.join(HERE, "model.onnx"), help="the generation model to copy")
    ap.add_argument("--out", required=True, help="the generation model with the trained weights")
    ap.add_argument("--text", help="train on this text file (its last 2 %% held out) instead of the KJV")
    ap.add_argument("--windows", type=int, default=2048)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=0, help="steps of linear warm-up (cldl train --warmup)")
    ap.add_argument("--cosine", action="store_true", help="the rate on a cosine down to --min-lr over all the steps")
    ap.add_argument("--min-lr", type=float, default=0.0)
    ap.add_argument("--clip-norm", type=float, default=0.0, help="clip the gradients' global norm (0: off)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval", action="store_true", help="held-out loss before and after (ONNX Runtime)")
    ap.add_argument("--checkpoint", help="also write the trained weights as train.py's checkpoint (torch.save), so "
                    "`train.py --export-only --checkpoint PATH` writes the zoo model and PyTorch's references")
    args = ap.parse_args()
    if os.path.abspath(args.out) == os.path.abspath(os.path.join(HERE, "model.onnx")):
        raise SystemExit("--out must not be the zoo's committed model.onnx")
    chars = json.load(open(os.path.join(HERE, "vocab.json")))["chars"]
    index = {c: i for i, c in enumerate(chars)}
    train_text, val_text = texts(args)
    train_ids = np.array([index[c] for c in train_text if c in index], dtype=np.int64)
    val_ids = np.array([index[c] for c in val_text if c in index], dtype=np.int64)
    rng = np.random.default_rng(args.seed)
    starts = rng.integers(0, len(train_ids) - args.seq - 1, args.windows)
    x = np.stack([train_ids[s:s + args.seq] for s in starts])
    y = np.stack([train_ids[s + 1:s + args.seq + 1] for s in starts])
    torch.manual_seed(args.seed)
    model = gpt.TinyGpt(len(chars))
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "train.onnx")
        training_export(model, args.seq, init)
        np.save(os.path.join(tmp, "x.npy"), x)
        np.save(os.path.join(tmp, "y.npy"), y)
        trained = os.path.join(tmp, "trained.onnx")
        t0 = time.monotonic()
        subprocess.run([args.cldl, "train", init, "--input", "tokens=" + os.path.join(tmp, "x.npy"), "--labels",
                        os.path.join(tmp, "y.npy"), "--loss", "cross_entropy", "--epochs", str(args.epochs), "--batch",
                        str(args.batch), "--optimizer", "adamw", "--lr", str(args.lr), "--weight-decay", "0.01",
                        "--seed", str(args.seed), "--out", trained, "--warmup", str(args.warmup),
                        "--schedule", "cosine" if args.cosine else "constant", "--min-lr", str(args.min_lr),
                        "--clip-norm", str(args.clip_norm)], check=True)
        if args.eval:
            before, after = held_out_loss(init, val_ids, args.seq), held_out_loss(trained, val_ids, args.seq)
            print(f"held-out loss {before:.3f} -> {after:.3f} nats/char ({len(val_ids)} characters)")
        write_generation_model(trained, args.model, args.out)
        if args.checkpoint:
            write_checkpoint(trained, model, args, round(time.monotonic() - t0), args.checkpoint)
    shutil.copy(os.path.join(HERE, "vocab.json"), os.path.join(os.path.dirname(os.path.abspath(args.out)), "vocab.json"))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
