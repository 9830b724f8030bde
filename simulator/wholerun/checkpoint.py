"""A checkpoint's size, write time, reload time and its cost to the step, from the model states the
memory model already knows (memory.state_bytes_per_param, sharded_params.rank_params).

What is saved: the module weights and the optimizer states (fp32 master + Adam's m and v under bf16/fp8),
each parameter once: W + K bytes per parameter (memory.state_bytes_per_param with zero 0 and a group of 1;
14 B for bf16 + AdamW, as Megatron's distributed checkpoint stores the model and the distributed optimizer).
Gradients are not saved (they are rebuilt by the next step).

Who writes what: every rank writes an equal share of its pipeline stage's state (Megatron's
fully-parallel save spreads replicated tensors over the data-parallel ranks), so a rank of stage s writes
stage_bytes(s) / (gpus / pp) and the slowest stage sets the time. A node writes its GPUs' shares at
`storage.write_gbs`; `storage.aggregate_write_gbs` caps the whole job.

Synchronous checkpoints stall the step for the whole write. Asynchronous ones (Megatron async_save,
PyTorch DCP async_save) stall only for the device-to-host copy into pinned host memory, which then holds a
copy of the rank's share until written: host memory, not GPU memory.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..plan.memory import training_state_bytes
from ..params import total_params
from ..scenario import Scenario
from ..plan.sharded_params import rank_params

GB = 1e9


@dataclass(frozen=True, kw_only=True, slots=True)
class Checkpoint:
    total_bytes: float
    """Weights + optimizer states of the whole model, each parameter once."""
    per_rank_bytes: float
    """The largest share one rank writes (its stage's state over the stage's ranks)."""
    per_node_bytes: float
    """The largest share one node writes (its GPUs' shares together)."""
    write_s: float
    """Time to write the checkpoint to storage (the slowest node, or the job's aggregate cap)."""
    reload_s: float
    """Time to read it back after a restart."""
    host_copy_s: float
    """Device-to-host copy of a rank's share (what an asynchronous checkpoint stalls the step for)."""
    asynchronous: bool
    stall_s: float
    """What one checkpoint costs the training: write_s (synchronous) or host_copy_s (asynchronous)."""
    host_bytes_per_node: float
    """Pinned host memory an asynchronous checkpoint holds per node (0 when synchronous)."""


def checkpoint_bytes_per_param(sc: Scenario) -> float:
    """W + K of `memory.training_state_bytes` unsharded (zero 0, group 1): what one parameter saves."""
    s = training_state_bytes(sc.training, 0, 1)
    return s.weights + s.optimizer


def stage_shares(sc: Scenario) -> list[float]:
    """Share of the model's parameters on each pipeline stage (per-rank parameters of the stage, which the
    stage's tp x ep sharding divides alike on every stage)."""
    per_stage = [rank_params(sc, r).total for r in range(sc.parallel.pp)]
    total = sum(per_stage)
    return [p / total for p in per_stage]


def checkpoint(sc: Scenario, asynchronous: bool = False) -> Checkpoint:
    """Size and timing of one checkpoint of `sc` (module docstring)."""
    st = sc.topology.storage
    total = total_params(sc.model) * checkpoint_bytes_per_param(sc)
    ranks_per_stage = sc.gpus / sc.parallel.pp
    per_rank = max(stage_shares(sc)) * total / ranks_per_stage
    per_node = per_rank * min(sc.gpus_per_node, sc.gpus)
    write = per_node / (st.write_gbs * GB)
    read = per_node / ((st.read_gbs or st.write_gbs) * GB)
    if st.aggregate_write_gbs is not None:
        write = max(write, total / (st.aggregate_write_gbs * GB))
        read = max(read, total / (st.aggregate_write_gbs * GB))
    copy = per_rank / (st.host_copy_gbs * GB)
    return Checkpoint(total_bytes=total, per_rank_bytes=per_rank, per_node_bytes=per_node, write_s=write,
                      reload_s=read, host_copy_s=copy, asynchronous=asynchronous,
                      stall_s=copy if asynchronous else write,
                      host_bytes_per_node=per_node if asynchronous else 0.0)
