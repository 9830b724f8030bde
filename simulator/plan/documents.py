"""Packed documents: what a document mask does to attention's cost and to context parallelism's balance.

Pre-training packs documents into each sequence. With `training.attention_mask: document` a token attends only
to earlier tokens of its own document (FlashAttention's varlen kernels, PyTorch FlexAttention's document
masks), so a sequence's attention costs the sum over its documents of l(l + 1)/2 query-key pairs instead of
s(s + 1)/2. Documents longer than what is left of a sequence are cut at its end and go on in the next one.

`training.documents` gives the length distribution (`Documents`); the packing is drawn with a fixed seed, so the
same scenario gives the same numbers. From it:
- `cost_vs_causal`: the sequences' mean sum of l(l + 1)/2 over s(s + 1)/2 (1 for one document per sequence);
- with context parallelism over c ranks, each rank's share of that work. Zig-zag (`parallel.cp_balance:
  zigzag`, Megatron's and ring-flash-attention's layout for a causal mask) gives rank r the chunks r and
  2c - 1 - r of 2c equal chunks: balanced for one document, uneven with documents, since which documents a
  chunk cuts decides its work. Per-document balancing (`document`, Llama 3's CP: every document split into
  2c pieces dealt the same way) keeps every rank at 1/c. The step waits for the busiest rank of each
  micro-batch: `cp_busiest_vs_causal` is that rank's work over the causal mask's per-rank work.

The attention ops are priced as the kernels run them (`layer_ops`): a document-masked attention of b
sequences as b * s / l_eff sequences of l_eff tokens (l_eff the token-weighted mean segment length), which
both prices the FLOPs and lets a calibration profile price the short sequences' kernel speed.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

import numpy as np

SEED = 0
"""The packing's random draw (deterministic)."""
TOKENS_DRAWN = 1 << 22
"""Tokens packed to estimate the costs: 4 M (64 sequences of 64K); at least 8 sequences."""
MAX_DOCUMENTS = 1 << 22
"""Documents drawn at most (fewer, longer sequences are drawn for tiny documents)."""


@dataclass(frozen=True)
class Packing:
    cost_vs_causal: float
    """Mean attention work of a sequence with the document mask over the causal mask's."""
    cp_busiest_vs_causal: float
    """The busiest CP rank's work per micro-batch over 1/c of the causal mask's (1 without CP)."""
    mean_segment: float
    """Token-weighted mean length of the pieces sequences hold: sum l^2 / sum l."""


def draw_lengths(distribution: str, mean: float, spread: float, bins: tuple, n_tokens: int, rng) -> np.ndarray:
    """Document lengths (tokens, >= 1) until they add up to n_tokens."""
    n = int(min(MAX_DOCUMENTS, max(16, 2 * n_tokens / max(mean, 1.0))))
    while True:
        if distribution == "fixed":
            lengths = np.full(n, max(1, round(mean)), dtype=np.int64)
        elif distribution == "uniform":
            lengths = rng.integers(max(1, round(mean - spread)), round(mean + spread) + 1, size=n)
        elif distribution == "lognormal":
            sigma2 = np.log1p((spread / mean) ** 2)
            lengths = np.maximum(1, np.rint(rng.lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), size=n))).astype(np.int64)
        else:  # histogram
            values = np.array([b[0] for b in bins], dtype=np.int64)
            weights = np.array([b[1] for b in bins], dtype=float)
            lengths = rng.choice(values, size=n, p=weights / weights.sum())
        if lengths.sum() >= n_tokens or n >= MAX_DOCUMENTS:
            return lengths
        n = min(MAX_DOCUMENTS, 2 * n)


def _triangle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sum of (k + 1) for k in [a, b): the keys seen by queries at in-document offsets a .. b - 1."""
    return (b * (b + 1) - a * (a + 1)) / 2.0


@lru_cache(maxsize=256)
def packing(distribution: str, mean: float, spread: float, bins: tuple, seq_len: int, cp: int, micro_batch: int,
            balance: str) -> Packing:
    """The costs of packing (module docstring) for sequences of `seq_len` tokens in micro-batches of
    `micro_batch` over `cp` ranks."""
    rng = np.random.default_rng(SEED)
    n_seq = max(8, TOKENS_DRAWN // seq_len)
    n_seq = max(micro_batch, n_seq - n_seq % micro_batch)
    lengths = draw_lengths(distribution, mean, spread, bins, n_seq * seq_len, rng)
    total = n_seq * seq_len
    # the pieces sequences hold: the token stream cut at every document boundary and every sequence edge
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    cuts = np.union1d(bounds[bounds < total], np.arange(0, total + 1, seq_len))
    seg_start, seg_len = cuts[:-1], np.diff(cuts).astype(float)
    work = seg_len * (seg_len + 1) / 2.0
    causal = seq_len * (seq_len + 1) / 2.0
    seq_of = seg_start // seq_len
    cost = float(np.bincount(seq_of, weights=work, minlength=n_seq).mean() / causal)
    mean_segment = float((seg_len ** 2).sum() / seg_len.sum())
    if cp <= 1:
        return Packing(cost, 1.0, mean_segment)
    if balance == "document":
        return Packing(cost, cost, mean_segment)
    # zig-zag: chunk j of 2c goes to rank min(j, 2c - 1 - j)
    chunk = seq_len // (2 * cp)
    pos = seg_start % seq_len
    load = np.zeros((n_seq, cp))
    for j in range(2 * cp):
        lo, hi = j * chunk, (j + 1) * chunk
        a = np.clip(pos, lo, hi)
        b = np.clip(pos + seg_len.astype(np.int64), lo, hi)
        inside = b > a
        w = _triangle((a - pos)[inside], (b - pos)[inside])
        np.add.at(load[:, min(j, 2 * cp - 1 - j)], seq_of[inside], w)
    per_mb = load.reshape(n_seq // micro_batch, micro_batch, cp).sum(axis=1)
    busiest = float((per_mb.max(axis=1) / (micro_batch * causal / cp)).mean())
    return Packing(cost, busiest, mean_segment)


def scenario_packing(sc) -> Optional[Packing]:
    """The packing costs of a scenario with `training.attention_mask: document`; None with a causal mask."""
    tr = sc.training
    if tr.attention_mask != "document" or tr.documents is None:
        return None
    d = tr.documents
    bins = tuple(tuple(b) for b in (d.bins or ()))
    return packing(d.distribution, float(d.mean or 0.0), float(d.spread or 0.0), bins, tr.seq_len, sc.parallel.cp,
                   tr.micro_batch, sc.parallel.cp_balance)


def attention_summary(sc) -> dict:
    """The report's `attention` block: the mask and what it costs against one causal document per sequence."""
    pk = scenario_packing(sc)
    return {"mask": sc.training.attention_mask,
            "cost_vs_causal": pk.cost_vs_causal if pk else 1.0,
            "cp_busiest_vs_causal": pk.cp_busiest_vs_causal if pk else 1.0,
            "cp_balance": sc.parallel.cp_balance,
            "mean_piece_tokens": pk.mean_segment if pk else float(sc.training.seq_len)}

