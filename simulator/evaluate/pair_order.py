"""The order in which the list scheduler takes an overlapped pair's nodes (DualPipe's forward and
backward of two micro-batches in one pass, `plan/overlap.py`).

The plan gives the pair as one block, the two passes' nodes alternating at their blocking collectives.
Which of the two runs next on the compute stream, and which collective goes first on a shared stream,
depends on how long each op takes, so the order is settled here, where ops have times: greedy list
scheduling over three chains (the forward, the backward's input gradients, its weight gradients), each
kept in its own order, taking next the chain whose next op can start first (a collective before a
compute op that could start at the same time, since it runs on its own stream; then in chain order, so
weight gradients fill what is left). This is what DualPipe's hand-arranged chunk does (DeepSeek-V3 report
§3.2.1, Fig. 4): while one micro-batch waits on its all-to-all the other computes. Both evaluators
take a pair's blocks from `pass_blocks`, so they schedule the same order.
"""
from __future__ import annotations

from collections import defaultdict

from ..plan.blocks import Block
from ..plan.opgraph import Compute, Node


def _chain(letter: str) -> int:
    """0: the forward's nodes, 1: the backward's input-gradient nodes (and recomputation), 2: its
    weight gradients, which nothing in the pass waits for."""
    return {"F": 0, "W": 2}.get(letter, 1)


def greedy_order(times, blk: Block) -> Block:
    """`blk` (an overlapped pair) with its nodes in the greedy order of the module docstring."""
    chains = [[i for i, letter in enumerate(blk.letters) if _chain(letter) == c] for c in (0, 1, 2)]
    pos = [0, 0, 0]
    finish: dict[int, float] = {}
    free: dict[str, float] = defaultdict(float)
    order: list[int] = []
    while any(p < len(ch) for p, ch in zip(pos, chains)):
        best = None
        for c in (0, 1, 2):
            if pos[c] == len(chains[c]):
                continue
            i = chains[c][pos[c]]
            node = blk.nodes[i]
            if any(d not in finish for d in node.deps):
                continue  # waits on another chain's op not taken yet
            stream = "compute" if isinstance(node.op, Compute) else node.op.dim
            start = max([free[stream]] + [finish[d] for d in node.deps])
            key = (start, stream == "compute", c)
            if best is None or key < best[0]:
                best = (key, c, i, stream, start)
        _, c, i, stream, start = best
        finish[i] = free[stream] = start + times(blk.nodes[i].op)
        pos[c] += 1
        order.append(i)
    where = {i: j for j, i in enumerate(order)}
    nodes = tuple(Node(blk.nodes[i].op, tuple(sorted(where[d] for d in blk.nodes[i].deps)), blk.nodes[i].tag)
                  for i in order)
    return Block(key=blk.key, nodes=nodes, letters=tuple(blk.letters[i] for i in order))


def pass_blocks(times, blocks: dict, key: tuple) -> tuple[Block, ...]:
    """The blocks of the pass `Step.key` names, an overlapped pair's in greedy order."""
    if key[0] != "FB":
        return blocks[key]
    return tuple(greedy_order(times, b) for b in blocks[key])
