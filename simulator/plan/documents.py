"""Attention masks beyond one causal document per sequence: packed documents and a sliding window, what they do to
attention's cost and to context parallelism's balance. The one place the mask's cost lives (`layer_mask`).

Pre-training packs documents into each sequence. With `training.attention_mask: document` a token attends only
to earlier tokens of its own document (FlashAttention's varlen kernels, PyTorch FlexAttention's document
masks), so a sequence's attention costs the sum over its documents of l(l + 1)/2 query-key pairs instead of
s(s + 1)/2. Documents longer than what is left of a sequence are cut at its end and go on in the next one.

A sliding window of W tokens (`model.sliding_window`, on the layers `ModelSpec.is_sliding_layer` names) lets the
query at offset o of its piece see min(o + 1, W) keys: a piece of n tokens costs F(n) = n(n + 1)/2 for n <= W,
W(W + 1)/2 + (n - W) W beyond (`keys_seen`). Without documents a sequence is one piece of s tokens (the same
code: a fixed length distribution of s tokens per document).

`training.documents` gives the length distribution (`Documents`); the packing is drawn with a fixed seed, so the
same scenario gives the same numbers. From it:
- `cost_vs_causal`: the sequences' mean sum of F(l) over s(s + 1)/2 (1 for one causal document per sequence);
- with context parallelism over c ranks, each rank's share of that work. Zig-zag (`parallel.cp_balance:
  zigzag`, Megatron's and ring-flash-attention's layout for a causal mask) gives rank r the chunks r and
  2c - 1 - r of 2c equal chunks: balanced for one document, uneven with documents (which documents a chunk
  cuts decides its work) and with a window (the first chunk holds the window's ramp). Per-document balancing
  (`document`, Llama 3's CP: every document split into 2c pieces dealt the same way) keeps every rank at 1/c
  of a causal mask and near it under a window. The step waits for the busiest rank of each micro-batch:
  `cp_busiest_vs_causal` is that rank's work over the causal mask's per-rank work.

The attention ops are priced as the kernels run them (`layer_ops`): a masked attention of b sequences as
sequences of l_eff = min(mean piece, W) tokens, as many as carry the masked work, which both prices the FLOPs
and lets a calibration profile price the short sequences' kernel speed.
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
    window: Optional[int] = None
    """The sliding window the costs are for (None: each query sees every earlier key of its piece)."""

    @property
    def kernel_tokens(self) -> float:
        """The length of the causal sequences the kernels are priced as (`attention_ops.masked`): min(piece, W)."""
        return min(self.mean_segment, self.window) if self.window is not None else self.mean_segment


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


def keys_seen(n, window: Optional[int]):
    """Sum over in-piece offsets o < n of the keys a query sees, min(o + 1, W): F(n) = n(n + 1)/2 up to W,
    W(W + 1)/2 + (n - W) W beyond (float arrays or scalars; n may be fractional where a piece is split)."""
    n = np.asarray(n, dtype=float)
    if window is None:
        return n * (n + 1) / 2.0
    m = np.minimum(n, window)
    return m * (m + 1) / 2.0 + (n - m) * window


def _pieces(seg_len: np.ndarray, cp: int, balance: str, seq_len: int, pos: np.ndarray):
    """(chunk j, in-piece start a, end b, piece index) of every (piece x CP chunk) overlap, chunk j of 2c going to
    rank min(j, 2c - 1 - j). zigzag: chunks of the sequence; document: each piece split into 2c equal parts."""
    for j in range(2 * cp):
        if balance == "document":
            a, b = seg_len * j / (2 * cp), seg_len * (j + 1) / (2 * cp)
            yield j, a, b, np.arange(len(seg_len))
            continue
        chunk = seq_len // (2 * cp)
        lo, hi = j * chunk, (j + 1) * chunk
        a = np.clip(pos, lo, hi)
        b = np.clip(pos + seg_len, lo, hi)
        inside = np.flatnonzero(b > a)
        yield j, (a - pos)[inside], (b - pos)[inside], inside


@lru_cache(maxsize=256)
def packing(distribution: str, mean: float, spread: float, bins: tuple, seq_len: int, cp: int, micro_batch: int,
            balance: str, window: Optional[int] = None) -> Packing:
    """The costs of packing (module docstring) for sequences of `seq_len` tokens in micro-batches of
    `micro_batch` over `cp` ranks, each query seeing at most `window` keys (None: all earlier ones)."""
    rng = np.random.default_rng(SEED)
    n_seq = max(8, TOKENS_DRAWN // seq_len)
    n_seq = max(micro_batch, n_seq - n_seq % micro_batch)
    lengths = draw_lengths(distribution, mean, spread, bins, n_seq * seq_len, rng)
    total = n_seq * seq_len
    # the pieces sequences hold: the token stream cut at every document boundary and every sequence edge
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    cuts = np.union1d(bounds[bounds < total], np.arange(0, total + 1, seq_len))
    seg_start, seg_len = cuts[:-1], np.diff(cuts).astype(float)
    work = keys_seen(seg_len, window)
    causal = seq_len * (seq_len + 1) / 2.0
    seq_of = seg_start // seq_len
    cost = float(np.bincount(seq_of, weights=work, minlength=n_seq).mean() / causal)
    mean_segment = float((seg_len ** 2).sum() / seg_len.sum())
    if cp <= 1:
        return Packing(cost, 1.0, mean_segment, window)
    if balance == "document" and window is None:
        return Packing(cost, cost, mean_segment, window)  # each piece's 2c parts dealt zig-zag: exactly even (causal)
    load = np.zeros((n_seq, cp))
    for j, a, b, which in _pieces(seg_len, cp, balance, seq_len, seg_start % seq_len):
        w = keys_seen(b, window) - keys_seen(a, window)
        np.add.at(load[:, min(j, 2 * cp - 1 - j)], seq_of[which], w)
    per_mb = load.reshape(n_seq // micro_batch, micro_batch, cp).sum(axis=1)
    busiest = float((per_mb.max(axis=1) / (micro_batch * causal / cp)).mean())
    return Packing(cost, busiest, mean_segment, window)


def layer_window(sc, layer: int) -> Optional[int]:
    """The window that limits layer `layer`'s keys, or None: none on the layer, or one no shorter than the
    sequence (no query has more keys than that)."""
    m = sc.model
    if not m.is_sliding_layer(layer) or m.sliding_window >= sc.training.seq_len:
        return None
    return m.sliding_window


def _packing(sc, window: Optional[int]) -> Optional[Packing]:
    """The mask's costs for a scenario's sequences under `window` (None: no window); None for one causal
    document per sequence."""
    tr, p = sc.training, sc.parallel
    documents = tr.attention_mask == "document" and tr.documents is not None
    if not documents and window is None:
        return None
    if not documents:  # one document of seq_len tokens per sequence
        return packing("fixed", float(tr.seq_len), 0.0, (), tr.seq_len, p.cp, tr.micro_batch, p.cp_balance, window)
    d = tr.documents
    bins = tuple(tuple(b) for b in (d.bins or ()))
    return packing(d.distribution, float(d.mean or 0.0), float(d.spread or 0.0), bins, tr.seq_len, p.cp,
                   tr.micro_batch, p.cp_balance, window)


def layer_mask(sc, layer: int) -> Optional[Packing]:
    """What the mask leaves of layer `layer`'s attention (`Packing`): the document mask
    (`training.attention_mask: document`) and the sliding window where the layer has one (`layer_window`); None when
    neither applies (one causal document per sequence). Layers from `model.layers` on are the MTP modules'."""
    return _packing(sc, layer_window(sc, layer))


def scenario_packing(sc) -> Optional[Packing]:
    """The document mask's costs without any window (`training.attention_mask: document`); None with a causal
    mask."""
    return _packing(sc, None)


def attention_layers(sc) -> range:
    """The layers that attend: the main ones and the MTP modules'."""
    return range(sc.model.layers + sc.model.mtp_layers)


def _mean_over_layers(sc, field: str) -> float:
    """`field` of each attending layer's `layer_mask` (1 where none applies), averaged over `attention_layers`."""
    masks = [layer_mask(sc, i) for i in attention_layers(sc)]
    return sum(getattr(m, field) if m else 1.0 for m in masks) / len(masks)


def mean_cost_vs_causal(sc) -> float:
    """The attention work left over the causal mask's, averaged over every attending layer (`attention_layers`)."""
    return _mean_over_layers(sc, "cost_vs_causal")


def attention_summary(sc) -> dict:
    """The report's `attention` block: the mask and what it costs against one causal document per sequence,
    averaged over the layers that attend (main and MTP) where a sliding window leaves some full."""
    pk = scenario_packing(sc)
    return {"mask": sc.training.attention_mask,
            "cost_vs_causal": mean_cost_vs_causal(sc),
            "cp_busiest_vs_causal": _mean_over_layers(sc, "cp_busiest_vs_causal"),
            "cp_balance": sc.parallel.cp_balance,
            "mean_piece_tokens": pk.mean_segment if pk else float(sc.training.seq_len),
            "sliding_window": sc.model.sliding_window,
            "sliding_layers": sc.model.sliding_layers}
