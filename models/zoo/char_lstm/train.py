#!/usr/bin/python3
"""Trains a character-level LSTM language model (embedding, 2-layer LSTM, dense) on the King James Bible
and exports it.

Data: /usr/lib/bible.data of Debian package bible-kjv-text, read with the `bible` program of package
bible-kjv (`bible -l10000 gen1:1-rev22:21`): one verse per line, verse numbers and chapter headings
dropped. The last 2% of the verses are held out for the validation loss.

Writes beside this script: model.onnx (inputs `tokens` i64 [B,T], `h_in` / `c_in` f32 [2,B,256];
outputs `logits` f32 [B,T,V], `h_out` / `c_out`), vocab.json, ref_tokens.npy + ref_logits.npy +
ref_h_out.npy + ref_c_out.npy (PyTorch's outputs for a fixed input from zero state) and reference.json
(greedy continuation of a fixed prompt, validation loss, training settings).
Run with Debian's python3-torch: /usr/bin/python3 models/zoo/char_lstm/train.py
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import kjv  # noqa: E402  (models/zoo/kjv.py: the text and its split)
SEED = 0
HIDDEN, LAYERS, EMBED = 256, 2, 32
SEQ, BATCH, STEPS, LR = 64, 16, 1000, 5e-3
PROMPT = "And God said"
GREEDY_TOKENS = 80


class CharLstm(torch.nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, EMBED)
        self.lstm = torch.nn.LSTM(EMBED, HIDDEN, LAYERS, batch_first=True)
        self.head = torch.nn.Linear(HIDDEN, vocab)

    def forward(self, tokens, h_in, c_in):
        y, (h, c) = self.lstm(self.embed(tokens), (h_in, c_in))
        return self.head(y), h, c


def greedy(model, ids, n):
    h = torch.zeros(LAYERS, 1, HIDDEN)
    c = torch.zeros(LAYERS, 1, HIDDEN)
    x = torch.tensor([ids])
    out, margins = [], []
    with torch.no_grad():
        for _ in range(n):
            logits, h, c = model(x, h, c)
            last = logits[0, -1]
            top = torch.topk(last, 2).values
            margins.append(float(top[0] - top[1]))
            nxt = int(last.argmax())
            out.append(nxt)
            x = torch.tensor([[nxt]])
    return out, min(margins)


def validation_loss(model, val):
    """The mean next-character cross entropy (nats) over the first 16K held-out characters, windows of SEQ from
    zero state."""
    model.eval()
    with torch.no_grad():
        n = (min(len(val), 16384) - 1) // SEQ * SEQ
        x = val[:n].reshape(-1, SEQ)
        y = val[1:n + 1].reshape(-1, SEQ)
        z = torch.zeros(LAYERS, x.shape[0], HIDDEN)
        logits, _, _ = model(x, z, z)
        return float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)))


def write_outputs(model, chars, val, out, settings):
    """Writes model.onnx, vocab.json, the reference outputs (PyTorch's, of `model`) and reference.json (with
    `settings`, how the model was trained) to the folder `out`."""
    index = {ch: i for i, ch in enumerate(chars)}
    val_loss = validation_loss(model, val)
    print(f"validation loss {val_loss:.3f} (nats/char)")

    prompt_ids = [index[ch] for ch in PROMPT]
    tokens, margin = greedy(model, prompt_ids, GREEDY_TOKENS)
    text = "".join(chars[t] for t in tokens)
    print(f"greedy: {PROMPT!r} -> {text!r} (smallest top-2 logit margin {margin:.4f})")

    # Fixed input for the output comparison: a verse fragment from zero state.
    ref_text = "In the beginning God created the heaven and the earth.\nAnd the"
    ref_tokens = torch.tensor([[index[ch] for ch in ref_text]])
    z = torch.zeros(LAYERS, 1, HIDDEN)
    with torch.no_grad():
        logits, h, c = model(ref_tokens, z, z)
    np.save(os.path.join(out, "ref_tokens.npy"), ref_tokens.numpy())
    np.save(os.path.join(out, "ref_logits.npy"), logits.numpy())
    np.save(os.path.join(out, "ref_h_out.npy"), h.numpy())
    np.save(os.path.join(out, "ref_c_out.npy"), c.numpy())

    torch.onnx.export(model, (ref_tokens, z, z), os.path.join(out, "model.onnx"),
                      input_names=["tokens", "h_in", "c_in"], output_names=["logits", "h_out", "c_out"],
                      dynamic_axes={"tokens": {0: "B", 1: "T"}, "h_in": {1: "B"}, "c_in": {1: "B"},
                                    "logits": {0: "B", 1: "T"}, "h_out": {1: "B"}, "c_out": {1: "B"}},
                      opset_version=17, do_constant_folding=True)
    with open(os.path.join(out, "vocab.json"), "w") as f:
        json.dump({"chars": chars}, f, ensure_ascii=True)
        f.write("\n")
    ref = {"prompt": PROMPT, "greedy_tokens": tokens, "greedy_text": text, "greedy_min_margin": margin,
           "val_loss": val_loss, "hidden": HIDDEN, "layers": LAYERS, "embed": EMBED, "seq": SEQ,
           "torch": torch.__version__,
           "data": "bible -l10000 gen1:1-rev22:21 (bible-kjv, /usr/lib/bible.data of bible-kjv-text), one verse a line, last 2% held out, validation loss over the first 16K held-out characters"}
    ref.update(settings)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    return val_loss, text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=STEPS, help="training steps (the committed model: %(default)s)")
    ap.add_argument("--out", default=HERE, help="folder for the model and references (default: beside this script)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    torch.set_num_threads(1)
    chars, train, val = kjv.char_split()
    index = {ch: i for i, ch in enumerate(chars)}

    model = CharLstm(len(chars))
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.steps)
    zeros = torch.zeros(LAYERS, BATCH, HIDDEN)

    def loss_of(x, y):
        logits, _, _ = model(x, zeros, zeros)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, len(chars)), y.reshape(-1))

    train_s = kjv.fit(loss_of, opt, sched, model.parameters(), train, SEQ, BATCH, args.steps)

    write_outputs(model, chars, val, args.out, {"steps": args.steps, "lr": LR, "batch": BATCH, "seed": SEED,
                                             "train_seconds": round(train_s)})


if __name__ == "__main__":
    main()
