"""`training.offload_layers` checks: activation offloading (`plan/offload.py` prices it) against the framework, the
model, the layout and the GPU.

Megatron's refusals are read at NVIDIA/Megatron-LM 0d8e0714cd29c01e164fe6de9f532182bdffa942 (Megatron-Bridge v0.2.0's
pin; the same lines hold at core_v0.14.0 and b0cc2706), megatron/core/transformer/transformer_config.py:988-1003:
the offloaded layers are fewer than the model's (0 <= N < num_layers), there is no pipeline parallelism, and no
recomputation of any kind. A GPU must say how fast it copies to its host (`topology.GPUSpec.host_link_gbs`)."""
from __future__ import annotations

from .errors import ScenarioError

KEY = "training.offload_layers"


def offload_problem(n: int, pp: int, recompute: str) -> tuple[str, str, str] | None:
    """(key, what, allowed) where Megatron refuses `n` offloaded layers with this layout, else None: the sweep skips
    such candidates, `check_offload` raises it."""
    if not n:
        return None
    if pp > 1:
        return (KEY, f"{n} with parallel.pp {pp} (Megatron: 'no support for Pipeline parallelism with CPU offloading')",
                "parallel.pp 1, or offload_layers 0")
    if recompute != "none":
        return (KEY, f"{n} with recompute {recompute} (Megatron refuses recomputation with CPU offloading)",
                "training.recompute none, or offload_layers 0")
    return None


def check_offload(framework, t, p, m, topologies) -> None:
    """Raise ScenarioError (key path, what, allowed) for an offloading scenario clustersim cannot price or the
    framework refuses; nothing when `t.offload_layers` is 0."""
    n = t.offload_layers
    if not n:
        return
    if framework.activation_offload is None:
        raise ScenarioError(KEY, f"{n} under framework {framework.name}, which does not offload activations to host memory",
                            "0, or framework megatron (its cpu_offloading_num_layers)")
    if n >= m.layers:
        raise ScenarioError(KEY, f"{n} for a model of {m.layers} layers", f"0 .. {m.layers - 1} (fewer than the model's layers)")
    problem = offload_problem(n, p.pp, t.recompute)
    if problem:
        raise ScenarioError(*problem)
    if p.ep_overlap:  # its merged forward-backward passes (plan/overlap.py) carry no host copies
        raise ScenarioError(KEY, f"{n} with parallel.ep_overlap (offloading inside the combined 1F1B passes is not priced)",
                            "parallel.ep_overlap false, or offload_layers 0")
    for topo in topologies:
        if topo.gpu.host_link_gbs is None:
            raise ScenarioError(KEY, f"{n} on topology {topo.name}, whose gpu.host_link_gbs is not stated",
                                "a topology whose gpu gives host_link_gbs (GB/s each way between the GPU and host memory)")
