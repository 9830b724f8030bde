"""Parameter groups and how data parallelism shards and synchronises them: one policy each, as data.

A rank's parameters are replicated over one of two layout groups (`DP_GROUPS`, `layout.group_shape`):
dense, embedding and head parameters over `dp_cp`, routed experts over the expert-DP group `edp`. A sharding policy says what the data-parallel ranks of that group keep
as a shard and which collectives run when:

  policy   optimizer  grads   weights  gradient sync                    parameter gather
  ddp      full       full    full     all-reduce, last backward        -
  zero1    shard      full    full     reduce-scatter, last backward    all-gather after the optimizer
  zero2    shard      shard   full     reduce-scatter, every backward   all-gather after the optimizer
  zero3    shard      shard   shard    reduce-scatter per block, every  all-gather per block before F,
                                       backward                         again before B (reshard)
  zero3-no-reshard  as zero3                                            all-gather per block before F only

Sources: ZeRO §5.1-5.3 and §7.2 (Rajbhandari et al. 2020); Megatron-LM's distributed optimizer
(`--use-distributed-optimizer`) is `zero1` here: gradients reduce-scattered once per step, parameters
all-gathered after the step (Megatron `distrib_optimizer.py`); DeepSpeed stage 2 reduces after every
backward since each rank keeps only its partition's accumulated gradients (deepspeedai/DeepSpeed#2252);
FSDP2's `fully_shard(reshard_after_forward=True)` is `zero3`, `reshard_after_forward=False` (what torchtitan
sets under pipeline parallelism, so each micro-batch's backward finds its parameters gathered)
`zero3-no-reshard`.

The plan (`plan/lower.py`) asks a policy which collectives to emit and when, `memory.py` which states
it divides; nothing else compares ZeRO stages.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, kw_only=True)
class ShardingPolicy:
    """What the data-parallel ranks of one parameter group keep, and which collectives sync them."""
    name: str
    zero: int
    """The ZeRO stage the policy is (`parallel.zero`)."""
    shards_optimizer: bool
    """Optimizer states (master weights, Adam moments) are 1/N per rank; the optimizer updates a shard."""
    shards_grads: bool
    """Accumulated gradients are 1/N per rank."""
    shards_weights: bool
    """Weights are 1/N per rank between uses, gathered per block (ZeRO-3 / FSDP)."""
    grad_collective: str
    """all_reduce | reduce_scatter."""
    grad_sync_every_micro_batch: bool
    """Gradients leave on every backward (a rank keeps only its shard's sum) rather than on the last."""
    gathers_after_step: bool
    """The updated parameter shards are all-gathered after the optimizer (ZeRO-1/2)."""
    gathers_per_block: bool
    """Each block's parameters are all-gathered before its forward, its gradients reduce-scattered after
    its backward (ZeRO-3)."""
    regather_for_backward: bool = False
    """With `gathers_per_block`: the parameters are freed after the forward and all-gathered again before
    the backward (FSDP2 `reshard_after_forward=True`, DeepSpeed stage 3). False keeps them gathered from
    the forward to the backward: one all-gather per micro-batch instead of two, the rank's unsharded
    parameters held meanwhile (FSDP2 `reshard_after_forward=False`, torchtitan's choice under PP)."""

    def state_divisors(self, group: int) -> tuple[float, float, float]:
        """(weights, grads, optimizer) divisors over a group of `group` ranks (ZeRO §5.1-5.3)."""
        n = float(max(1, group))
        return (n if self.shards_weights else 1.0, n if self.shards_grads else 1.0,
                n if self.shards_optimizer else 1.0)


DDP = ShardingPolicy(name="ddp", zero=0, shards_optimizer=False, shards_grads=False, shards_weights=False,
                     grad_collective="all_reduce", grad_sync_every_micro_batch=False, gathers_after_step=False,
                     gathers_per_block=False)
ZERO1 = ShardingPolicy(name="zero1", zero=1, shards_optimizer=True, shards_grads=False, shards_weights=False,
                       grad_collective="reduce_scatter", grad_sync_every_micro_batch=False, gathers_after_step=True,
                       gathers_per_block=False)
ZERO2 = ShardingPolicy(name="zero2", zero=2, shards_optimizer=True, shards_grads=True, shards_weights=False,
                       grad_collective="reduce_scatter", grad_sync_every_micro_batch=True, gathers_after_step=True,
                       gathers_per_block=False)
ZERO3 = ShardingPolicy(name="zero3", zero=3, shards_optimizer=True, shards_grads=True, shards_weights=True,
                       grad_collective="reduce_scatter", grad_sync_every_micro_batch=True, gathers_after_step=False,
                       gathers_per_block=True, regather_for_backward=True)
ZERO3_NO_RESHARD = replace(ZERO3, name="zero3-no-reshard", regather_for_backward=False)
"""ZeRO-3 keeping each block's gathered parameters until its backward (`parallel.reshard_after_forward:
false`)."""
POLICIES = {p.zero: p for p in (DDP, ZERO1, ZERO2, ZERO3)}
"""`parallel.zero` -> its policy."""


def sharding_policy(zero: int, reshard_after_forward: bool = True) -> ShardingPolicy:
    """The policy of ZeRO stage `zero` (0-3); ZeRO-3 without `reshard_after_forward` is `ZERO3_NO_RESHARD`."""
    try:
        pol = POLICIES[zero]
    except KeyError:
        raise ValueError(f"no sharding policy for ZeRO stage {zero!r}; one of {sorted(POLICIES)}") from None
    return ZERO3_NO_RESHARD if pol is ZERO3 and not reshard_after_forward else pol


def scenario_policy(sc) -> ShardingPolicy:
    """The sharding policy a scenario asks for (`parallel.zero`, `parallel.reshard_after_forward`)."""
    return sharding_policy(sc.parallel.zero, sc.parallel.reshard_after_forward)


DP_GROUPS = ("dp_cp", "edp")
"""The layout groups (`layout.group_shape`) parameters are replicated and sharded over, in the order the
plan and memory split them: dense, embedding and head parameters over dp x cp; routed experts over the
expert-DP group (each expert lives on one EP rank of every dp x cp / ep replica; Megatron's
`expert_data_parallel` groups)."""
