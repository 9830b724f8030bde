"""DualPipe's overlapped chunk: the forward of one micro-batch and the backward of another run as one
pass, so that each one's all-to-alls (and other blocking collectives) are in flight while the other
computes (DeepSeek-V3 report §3.2.1, Fig. 4: attention, dispatch, MLP and combine of the two chunks
rearranged; deepseek-ai/DualPipe `_forward_backward_chunk`).

The pair is one block whose nodes are the two passes' nodes, each pass cut into segments that end at
its blocking collectives and the segments taken in turn, F first: F's compute up to its dispatch, then
B's compute up to its first all-to-all while the dispatch is in flight, then F's experts while B's
collective is in flight, and so on. Each pass keeps its own dependencies (a block's first ops wait
for the same pass's previous block, as between blocks of a plain pass), so neither waits on the
other except through the shared compute stream and the shared collective streams. The SM cost of
the collectives running beside compute is the cost model's (`evaluate/sm_share.py`; for the expert
all-to-alls the SMs their dispatcher's kernels hold, `cost/ep_sm_share.py`: the report gives 20 of the
H800's 132 SMs to communication).

Nothing here is timed: the order is structural, the evaluators' list scheduler times it.
"""
from __future__ import annotations

from .blocks import Block
from .opgraph import Comm, Compute, Node


def _flatten(blocks: tuple[Block, ...]) -> tuple[list[Node], list[str]]:
    """One pass as one node list: each block's roots wait for the previous block's last compute and the
    blocking collectives issued after it (`PassScheduler`'s anchor, made explicit), weight gradients
    aside: the next layer's backward needs the input gradient, not the weight gradients, which can
    fill the compute stream later (DualPipe's "ATTN(W)", "MLP(W)")."""
    nodes: list[Node] = []
    letters: list[str] = []
    anchor: tuple[int, ...] = ()
    for blk in blocks:
        base = len(nodes)
        last_compute = None
        for i, node in enumerate(blk.nodes):
            deps = tuple(base + d for d in node.deps) if node.deps else anchor
            nodes.append(Node(node.op, deps, node.tag))
            letters.append(blk.letters[i])
            if isinstance(node.op, Compute) and blk.letters[i] != "W":
                last_compute = i
        if last_compute is not None:
            trailing = [base + j for j in range(last_compute + 1, len(blk.nodes))
                        if isinstance(blk.nodes[j].op, Comm) and blk.nodes[j].op.blocking]
            anchor = tuple([base + last_compute] + trailing)
    return nodes, letters


def _segments(nodes: list[Node]) -> list[list[int]]:
    """Indices cut after each blocking collective (the point where the pass would wait), or after the
    last of a run of collectives (the token counts and the dispatch go out together)."""
    out, cur = [], []
    for i, node in enumerate(nodes):
        cur.append(i)
        nxt = nodes[i + 1].op if i + 1 < len(nodes) else None
        if isinstance(node.op, Comm) and node.op.blocking and not isinstance(nxt, Comm):
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def overlapped_block(forward: tuple[Block, ...], backward: tuple[Block, ...], key: str) -> Block:
    """The F pass `forward` and the B pass `backward` of two micro-batches as one block (module docstring)."""
    parts = [_flatten(forward), _flatten(backward)]
    segs = [_segments(n) for n, _ in parts]
    order: list[tuple[int, int]] = []
    for k in range(max(len(s) for s in segs)):
        for p in (0, 1):
            if k < len(segs[p]):
                order += [(p, i) for i in segs[p][k]]
    where = {pi: j for j, pi in enumerate(order)}
    nodes, letters = [], []
    for p, i in order:
        node = parts[p][0][i]
        nodes.append(Node(node.op, tuple(sorted(where[(p, d)] for d in node.deps)), node.tag))
        letters.append(parts[p][1][i])
    return Block(key=key, nodes=tuple(nodes), letters=tuple(letters))
