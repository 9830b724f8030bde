"""Activation offloading (`training.offload_layers` = N): the stored tensors of the model's first N decoder layers are
copied to host memory during the forward and back during the backward, on copy streams beside the compute; the
compute waits for a copy only where the framework synchronises. This module says which bytes move and when each copy
is issued and waited for; the pass scheduler runs the copies (`evaluate/passes.py`, priced by
`CostModel.host_copy_time`), the memory model keeps the offloaded bytes off the GPU (`memory.py`).

One group per layer: Megatron runs each decoder layer inside Transformer Engine's offload context and commits the group
after it (NVIDIA/Megatron-LM 0d8e0714 megatron/core/transformer/transformer_block.py:302-322, :725-748; the embedding,
the head and MTP layers are outside). L is the model's decoder layers. Two implementations (`spec.OFFLOAD_SCHEMES`):

- `te_v1` (TransformerEngine 70f536662, release_v2.9, transformer_engine/pytorch/cpu_offload.py; the same code as
  cpu_offload_v1.py in 2.12): a window map spreads the N groups over the L layers, window[i] = (L // N) (i + 1) - 1
  plus a share of L % N (:343-350), so window[N-1] = L - 1. Forward (:496-539): group 0's copy starts after layer 0;
  at the end of layer window[k] the compute waits for group k's copy, frees it, and starts group k + 1's: one copy in
  flight on the device-to-host stream. Backward (:633-656): before layer window[k]'s backward, group k's reload is
  issued on the host-to-device stream once the previous one is done (the compute waits for it); before layer 0's,
  the compute waits for all. Only tensors TE or Megatron mark are moved (:718-719): not the MoE grouped linears'
  inputs, the router's scores or the dropout masks (`V1_KEPT`).
- `te_v2` (TransformerEngine 5671fd36, 2.12, cpu_offload.py; the default there): every saved tensor of 256K elements or
  more except weights (:438-459); one stream for both directions (:493-496); layer i's copy is queued when layer i + 1
  starts (:612-622) and the compute waits for it before layer L - N + i (:302-317), so that L - N layers are resident
  at most (:591-598); layer i's reload starts before the backward of layer L - 1 - N + i and is waited for when layer
  i's backward needs it (:606-608, :418-428).

Memory: an offloaded layer's moved bytes are not resident between its copy and its reload. With `te_v1` the last group
is still on the GPU at the end of the forward beside the L - N resident layers, so one offloaded layer's moved bytes
are a layer temporary (`in_flight_bytes`); `te_v2` waits for it before the last layer.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..scenario import Scenario
from .activations import layer_activation_terms
from .opgraph import ACT_BYTES

V1_KEPT = ("expert_fc1_input", "expert_fc2_input", "router_probs", "expert_probs", "expert_output",
           "attn_dropout_mask", "mlp_dropout_mask")
"""Stored tensors TE v1 leaves on the GPU: it moves only tensors carrying `activation_offloading`, which TE's
LayerNormLinear, LayerNormMLP, Linear and attention set and Megatron sets on its parallel linears' inputs and the fused
SwiGLU input (TransformerEngine release_v2.9 cpu_offload.py:718-719; Megatron-LM 0d8e0714 tensor_parallel/layers.py
:1022-1029, fused_bias_swiglu.py:118-120); the grouped linears of the experts, the router and the dropout masks do not."""
V2_MIN_ELEMENTS = 256 * 1024
"""TE v2 keeps tensors below 256K elements on the GPU (TransformerEngine 5671fd36 cpu_offload.py:438-459); a stored
term's elements are read as its bytes over the activation element size."""


@dataclass(frozen=True, slots=True)
class HostCopy:
    """One layer's stored tensors copied to (d2h) or from (h2d) host memory, on `stream`."""
    key: str
    """The layer's name in traces and waits: "L3"."""
    direction: str
    """d2h (forward) | h2d (backward)."""
    bytes: float
    stream: str
    """The copy stream: "d2h" or "h2d" (`te_v1`), "host" (`te_v2`: one stream both ways)."""


@dataclass(frozen=True, slots=True)
class LayerCopies:
    """What happens around one layer's pass: `issue` copies are queued (on their streams, in order), then the compute
    waits for the copies named in `wait` (their keys and directions)."""
    issue: tuple[HostCopy, ...] = ()
    wait: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class OffloadPlan:
    forward: dict
    """Layer -> `LayerCopies` at the end of its forward (issued, then waited for before anything after it runs)."""
    backward: dict
    """Layer -> `LayerCopies` before its backward (issued once the compute before it is issued, then waited for)."""


def scheme(sc: Scenario) -> str | None:
    """The framework's offloading implementation when the scenario offloads, else None."""
    return sc.framework.activation_offload if sc.training.offload_layers else None


def offloaded(sc: Scenario, layer: int) -> bool:
    """Layer `layer` (0-based) is offloaded: one of the first N decoder layers (N is below the model's layers, so an MTP
    layer, numbered after them, never is)."""
    return layer < sc.training.offload_layers


def moved_terms(sc: Scenario, layer: int) -> dict[str, float]:
    """The stored tensors of `layer` its copies move (empty for a layer that is not offloaded)."""
    if not offloaded(sc, layer):
        return {}
    terms = layer_activation_terms(sc, layer)
    if scheme(sc) == "te_v1":
        return {k: v for k, v in terms.items() if k not in V1_KEPT}
    ab = ACT_BYTES[sc.training.precision]
    return {k: v for k, v in terms.items() if v / ab >= V2_MIN_ELEMENTS}


def moved_bytes(sc: Scenario, layer: int) -> float:
    return float(sum(moved_terms(sc, layer).values()))


def in_flight_bytes(sc: Scenario, layers) -> float:
    """The offloaded bytes on the GPU beside the resident layers at the forward's end (`te_v1`: the last group, whose
    copy the compute waits for after the last layer); 0 with `te_v2` (module docstring)."""
    if scheme(sc) != "te_v1":
        return 0.0
    return max((moved_bytes(sc, i) for i in layers if offloaded(sc, i)), default=0.0)


def v1_windows(layers: int, groups: int) -> list[int]:
    """TE v1's window map (module docstring): the layer at whose end group i's copy is waited for."""
    out, constant = [], 0
    for i in range(groups):
        w = (layers // groups) * (i + 1) - 1
        if i < layers % groups:
            w += i + 1
            constant = i + 1
        else:
            w += constant
        out.append(w)
    return out


def offload_plan(sc: Scenario) -> OffloadPlan | None:
    """When each offloaded layer's copies are issued and waited for (module docstring); None without offloading."""
    how = scheme(sc)
    if how is None:
        return None
    return _plan(how, sc.model.layers, sc.training.offload_layers, tuple(moved_bytes(sc, i) for i in range(sc.training.offload_layers)))


@lru_cache(maxsize=64)
def _plan(how: str, L: int, n: int, sizes: tuple[float, ...]) -> OffloadPlan:
    fwd: dict[int, list] = {}
    bwd: dict[int, list] = {}

    def add(table, layer, issue=None, wait=None):
        entry = table.setdefault(layer, [[], []])
        if issue is not None:
            entry[0].append(issue)
        if wait is not None:
            entry[1].append(wait)

    def copy(i, direction):
        stream = "host" if how == "te_v2" else direction
        return HostCopy(key=f"L{i}", direction=direction, bytes=sizes[i], stream=stream)

    if how == "te_v1":
        win = v1_windows(L, n)
        add(fwd, 0, issue=copy(0, "d2h"))
        for k in range(n):
            if k + 1 < n:
                add(fwd, win[k], issue=copy(k + 1, "d2h"))
            add(fwd, win[k], wait=(f"L{k}", "d2h"))
            add(bwd, win[k], issue=copy(k, "h2d"))
            if k + 1 < n:
                add(bwd, win[k], wait=(f"L{k + 1}", "h2d"))
        add(bwd, 0, wait=("L0", "h2d"))
    else:
        for i in range(n):
            add(fwd, i, issue=copy(i, "d2h"))
            add(fwd, L - n + i - 1, wait=(f"L{i}", "d2h"))
            add(bwd, L - 1 - n + i, issue=copy(i, "h2d"))
            add(bwd, i, wait=(f"L{i}", "h2d"))
    return OffloadPlan(forward={k: LayerCopies(tuple(a), tuple(b)) for k, (a, b) in fwd.items()},
                       backward={k: LayerCopies(tuple(a), tuple(b)) for k, (a, b) in bwd.items()})
