"""The King James Bible as character-level training data for the zoo's language models.

Read with the `bible` program (Debian package bible-kjv) from /usr/lib/bible.data (package
bible-kjv-text): every verse, in order. The last 2% of verses are held out for validation.
"""
import re
import subprocess

import torch


def load_verses():
    out = subprocess.run(["bible", "-l10000", "gen1:1-rev22:21"], check=True, capture_output=True, text=True).stdout
    verses = [m.group(1) for m in re.finditer(r"^ +\d+ (.*)$", out, re.M)]
    if len(verses) < 31000:
        raise SystemExit(f"expected the 31102 verses of the KJV from `bible`, got {len(verses)}")
    return verses


def char_split():
    """(chars, train ids, val ids): the vocabulary (sorted characters) and the two id tensors."""
    verses = load_verses()
    split = int(len(verses) * 0.98)
    train_text = "\n".join(verses[:split]) + "\n"
    val_text = "\n".join(verses[split:]) + "\n"
    chars = sorted(set(train_text) | set(val_text))
    index = {ch: i for i, ch in enumerate(chars)}
    train = torch.tensor([index[ch] for ch in train_text], dtype=torch.int64)
    val = torch.tensor([index[ch] for ch in val_text], dtype=torch.int64)
    print(f"{len(verses)} verses, {len(train)} train / {len(val)} val characters, vocab {len(chars)}")
    return chars, train, val


def fit(loss_of, opt, sched, params, train, seq, batch, steps):
    """Trains on random windows of `seq` characters: loss_of(x, y) gives the loss of a batch of inputs x and
    next-character targets y ([batch, seq] each). Clips gradients at 1; prints every 50 steps; returns the
    seconds it took."""
    import time
    params = list(params)  # a generator would be used up after the first clip
    t0 = time.time()
    for step in range(1, steps + 1):
        starts = torch.randint(0, len(train) - seq - 1, (batch,))
        x = torch.stack([train[s:s + seq] for s in starts])
        y = torch.stack([train[s + 1:s + seq + 1] for s in starts])
        loss = loss_of(x, y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0:
            print(f"step {step}: train loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)
    return time.time() - t0
