"""Deterministic synthetic training data, and which part of it one rank sees.

Every rank (and the single-process reference) regenerates the whole global batch of a step from
`(seed, step)` and keeps its slice, so no data is ever sent and the parallel run and the reference
train on exactly the same tokens. The tokens follow a fixed random permutation ("next = P[cur]") with
some noise, so the loss falls within a few steps and a broken gradient shows up as a loss that does not.
"""
from __future__ import annotations

import torch

FOLLOW_PROB = 0.75
"""Probability that the next token follows the permutation; the rest are uniform noise."""


def global_batch(seed: int, step: int, batch: int, seq_len: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels), both int64 [batch, seq_len]: the whole step's sequences, same on every rank."""
    perm = torch.randperm(vocab, generator=torch.Generator().manual_seed(seed))
    g = torch.Generator().manual_seed(seed * 1_000_003 + step + 1)
    noise = torch.randint(vocab, (batch, seq_len + 1), generator=g)
    follow = torch.rand((batch, seq_len + 1), generator=g) < FOLLOW_PROB
    tokens = torch.empty((batch, seq_len + 1), dtype=torch.long)
    tokens[:, 0] = noise[:, 0]
    for j in range(1, seq_len + 1):
        tokens[:, j] = torch.where(follow[:, j], perm[tokens[:, j - 1]], noise[:, j])
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def zigzag_positions(seq_len: int, cp: int, cp_rank: int) -> torch.Tensor:
    """Sequence positions held by one context-parallel rank: chunks r and 2c-1-r of 2c (USP; Llama 3),
    so every rank does the same causal-attention work."""
    if cp == 1:
        return torch.arange(seq_len)
    chunk = seq_len // (2 * cp)
    first = torch.arange(cp_rank * chunk, (cp_rank + 1) * chunk)
    second = torch.arange((2 * cp - 1 - cp_rank) * chunk, (2 * cp - cp_rank) * chunk)
    return torch.cat([first, second])


def rank_batch(inputs: torch.Tensor, labels: torch.Tensor, *, dp: int, dp_rank: int,
               positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's sequences (its DP replica's contiguous share) and positions (its CP share)."""
    per = inputs.shape[0] // dp
    rows = slice(dp_rank * per, (dp_rank + 1) * per)
    return inputs[rows][:, positions].contiguous(), labels[rows][:, positions].contiguous()
