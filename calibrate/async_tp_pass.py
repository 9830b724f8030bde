"""Which TP collectives PyTorch's micro-pipeline TP pass (torchtitan's async TP) fuses in a transformer block.

Runs the real Inductor pass on CPU: a torchtitan-style Llama block (RMSNorms `SequenceParallel`, attention and
feed-forward inputs `PrepareModuleInput` Shard(1) -> Replicate, Q/K/V and w1/w3 `ColwiseParallel`, wo and w2
`RowwiseParallel` to Shard(1): torchtitan/models/llama3/parallelize_llama.py at 820504e2, :178-197) under a
fake process group of `--tp` ranks, compiled with `torch._inductor.config._micro_pipeline_tp` and symmetric
memory in its test mode, and counts, in the post-grad forward and backward graphs, the fused ops
(`symm_mem.fused_all_gather_matmul`, `fused_matmul_reduce_scatter`) and the collectives left plain. Nothing
executes on a GPU: the fused ops run their reference fallback on CPU, the fake group moves no data.

  python -m calibrate.async_tp_pass [--fused-qkv] [--full-ac] [--tp 4]   -> one JSON object on stdout

`tests/test_async_tp_pass.py` compares the counts with what `simulator/plan/tp_overlap.py` prices as fused.
It must run in its own process (it initializes a process group and sets Inductor's global config).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys

COUNTED = {"fused_all_gather_matmul": "fused_all_gather", "fused_matmul_reduce_scatter": "fused_reduce_scatter",
           "all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter"}
"""Post-grad graph op name (its overload stripped) -> the key it is counted under."""


def _count(graph) -> dict[str, int]:
    counts: collections.Counter = collections.Counter()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        parts = str(node.target).split(".")
        name = parts[-2] if len(parts) > 1 else parts[-1]
        if name in COUNTED:
            counts[COUNTED[name]] += 1
    return dict(sorted(counts.items()))


def probe(tp: int, fused_qkv: bool, full_ac: bool, dim: int = 256, hidden: int = 1024, seq: int = 256) -> dict:
    """{"forward": counts, "backward": counts} for one block of `dim` (Q, K, V one linear if `fused_qkv`),
    `seq` tokens over `tp` ranks, whole-block activation checkpointing if `full_ac`."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch._inductor.custom_graph_pass import CustomGraphPass
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    from torch.testing._internal.distributed.fake_pg import FakeStore

    # the pass returns early where NCCL is not built in (a CPU wheel); the fake group stands in for it
    dist.is_nccl_available = lambda: True
    import torch.distributed._symmetric_memory as symm

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp)
    mesh = init_device_mesh("cpu", (tp,))
    lib = torch.library.Library("symm_mem", "IMPL")  # the fused ops' reference fallbacks, on CPU
    lib.impl("fused_all_gather_matmul", symm._fused_all_gather_matmul_fallback, "CPU")
    lib.impl("fused_matmul_reduce_scatter", symm._fused_matmul_reduce_scatter_fallback, "CPU")

    graphs: list[dict] = []

    class Record(CustomGraphPass):
        def __call__(self, graph):
            graphs.append(_count(graph))

        def uuid(self):
            return "calibrate.async_tp_pass"

    torch._inductor.config._micro_pipeline_tp = True
    torch._inductor.config.post_grad_custom_post_pass = Record()

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            if fused_qkv:
                self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
            else:
                self.wq, self.wk, self.wv = (nn.Linear(dim, dim, bias=False) for _ in range(3))
            self.wo = nn.Linear(dim, dim, bias=False)

        def forward(self, x):
            q, k, v = self.wqkv(x).chunk(3, dim=-1) if fused_qkv else (self.wq(x), self.wk(x), self.wv(x))
            return self.wo(q * k + v)  # the core attention's kind does not matter to the pass

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(dim, hidden, bias=False)
            self.w2 = nn.Linear(hidden, dim, bias=False)
            self.w3 = nn.Linear(dim, hidden, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm, self.ffn_norm = nn.RMSNorm(dim), nn.RMSNorm(dim)
            self.attention, self.feed_forward = Attention(), FeedForward()

        def forward(self, x):
            h = x + self.attention(self.attention_norm(x))
            return h + self.feed_forward(self.ffn_norm(h))

    plan = {"attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1))}
    plan.update({"attention.wqkv": ColwiseParallel()} if fused_qkv
                else {f"attention.w{n}": ColwiseParallel() for n in "qkv"})
    block = parallelize_module(Block(), mesh, plan)
    if full_ac:  # torchtitan's full AC: the block wrapped whole, then compiled
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        block = checkpoint_wrapper(block, preserve_rng_state=False)
    compiled = torch.compile(block, fullgraph=True)
    x = torch.randn(2, seq // tp, dim, requires_grad=True)  # the block input: this rank's sequence shard
    with symm._test_mode():
        compiled(x).sum().backward()
    dist.destroy_process_group()
    if len(graphs) != 2:
        raise RuntimeError(f"expected one forward and one backward graph, got {len(graphs)}")
    return {"forward": graphs[0], "backward": graphs[1]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--fused-qkv", action="store_true", help="Q, K and V as one linear (torchtitan's Llama 3 now)")
    ap.add_argument("--full-ac", action="store_true", help="whole-block activation checkpointing")
    args = ap.parse_args(argv)
    if args.tp < 2:
        print("error: --tp: must be at least 2 (TP needs a group)", file=sys.stderr)
        return 2
    print(json.dumps(probe(args.tp, args.fused_qkv, args.full_ac), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
