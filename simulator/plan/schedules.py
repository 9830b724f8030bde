"""Pipeline schedules: one `ScheduleSpec` per schedule in one registry, `SCHEDULES`.

A spec says everything the rest of the simulator needs to know about a schedule: the chunk counts and
micro-batch counts it is defined for, where its chunks sit, whether it splits the backward, how many
micro-batches each rank holds, its per-rank action lists, and its names in torch and in the training
frameworks the sweep exports to. Every other module asks the spec (`schedule_spec(name).splits_backward`)
instead of comparing names, so a new schedule is one entry here (and its tests).

The action lists say, for every pipeline rank, in which order it runs the forward (F), input-grad
backward (B) and weight-grad backward (W) of each (chunk, micro-batch). The plan (`plan/lower.py`) turns
them into each stage's steps, which both evaluators run (tests/schedule_oracle.py executes the bare lists
with free communication, the tests' oracle). Chunk placement is `ScheduleSpec.place`,
which `layout.chunk_owner` asks too. Schedules that do not split the backward emit B immediately followed
by W of the same (chunk, micro-batch). docs/modeling.md §6 has the bubble formulas.

Naming against torch's schedule IR (`torch.distributed.pipelining`, docs/ecosystem.md §2.5): torch's
`cBm` (full backward) is our B then W, torch's `cIm` is our B, torch's `cWm` is our W; torch's
stage index is our chunk index.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..inputs import spelling
from .dualpipe import dualpipe_actions, dualpipe_inflight, dualpipev_actions, dualpipev_inflight
from .pipeline_actions import KINDS, Action, Lane, RankActions, RankInflight, RankOrder  # noqa: F401 (KINDS, Action: re-exported)

def join_names(names: Iterable[str], word: str = "or") -> str:
    """['a', 'b', 'c'] -> 'a, b or c' (for error messages)."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {word} {names[-1]}"


@dataclass(frozen=True, kw_only=True)
class ScheduleSpec:
    """One pipeline schedule: what it is defined for, how it places and runs chunks, what it holds."""
    name: str
    """As in the scenario contract (`parallel.pp_schedule`)."""
    actions: RankActions
    """The rank-list builder: one rank's actions for (rank, pp, vpp, m) (call `rank_lists` for all ranks)."""
    inflight: RankInflight
    """Activations held: per local chunk of a rank, micro-batches in flight at its peak (`memory.py`)."""
    vpp: int | None = 1
    """Model chunks per pp rank the schedule is built for; None: any number >= `min_vpp`."""
    min_vpp: int = 1
    """Fewest chunks per rank when `vpp` is None."""
    vpp_note: str = ""
    """Why `vpp` is fixed, said in the error when a scenario asks for another."""
    v_shaped: bool = False
    """Placement. True: chunks 0..p-1 on ranks 0..p-1, then p..2p-1 on ranks p-1..0, so rank 0 holds both
    the first and the last chunk (ZB-V, DualPipeV, DualPipe's two copies). False: chunk c on rank c % p (Megatron's virtual
    pipeline, NAR21 §2.2.2; c = rank when vpp = 1)."""
    splits_backward: bool = False
    """True: W runs as its own pass apart from B and the input gradient goes upstream when B ends (ZB §2;
    ZB-H1, ZB-V, DualPipeV), even where W follows at once. False: one autograd backward per chunk (dgrad
    and wgrad interleaved layer by layer, Megatron's non-split schedules), so the input gradient leaves
    only after the whole backward, W included; sending it when B ends would understate the bubble (1F1B
    p=4 m=8 at equal F/B/W: 20.0 % instead of 27.3 %)."""
    m_multiple_of_pp: bool = False
    """Micro-batches must come in whole groups of pp (Megatron's interleaved order)."""
    min_m_per_pp: int = 0
    """Micro-batches must be at least this many times pp (DualPipeV: 2)."""
    routes: int = 1
    """1: every micro-batch runs through every chunk in order. 2: the model is held twice (DualPipe,
    `plan/dualpipe.py`): chunks 0..n/2-1 are one copy, n/2..n-1 the other, each a micro-batch's whole route, half
    of the micro-batches through each; even micro-batch counts only."""
    pp_even: bool = False
    """pp must be even (DualPipe pairs rank r with rank p-1-r)."""
    shares_edge_tables: bool = False
    """The rank holding the first chunk and the last one keeps one input-embedding table for both: the LM head's
    tied copy and the MTP modules' lookups use it, where a framework that builds each chunk as its own module keeps
    a second table on the last chunk (`sharded_params.head_rank_tensors`). DualPipe: DeepSeek-V3 technical report
    (arXiv 2412.19437) §3.2.3, "Shared Embedding and Output Head for Multi-Token Prediction": DualPipe puts the
    shallowest layers (with the embedding) and the deepest (with the output head) on one PP rank so that the MTP
    module and the main model share those parameters and their gradients physically."""
    p2p_in_steady_state: bool = False
    """One chunk per rank and at most its distance to the last stage in flight, so every PP send shows in
    the steady state: `parallel.pp_p2p: blocking` (nanotron's blocking sends) is modelled only for such a
    schedule."""
    combined_order: RankOrder | None = None
    """Megatron's EP all-to-all overlap (`parallel.ep_overlap`, `plan/ep_overlap.py`) runs this order with one
    warm-up forward more, each steady forward merged with the backward beside it; None: not this schedule."""
    combined_needs_pp1: bool = False
    """The overlap runs in this order only without a pipeline (1F1B at pp = 1: Megatron's no-pipelining
    combined 1F1B; with pp > 1 it asserts a virtual pipeline, transformer_config.py:3007-3011)."""
    torch_class: str | None = None
    """The class in `torch.distributed.pipelining` that `calibrate replay` runs (docs/ecosystem.md §2.3)."""
    torch_m_at_least_pp: bool = False
    """torch's class refuses fewer than pp micro-batches (Schedule1F1B)."""
    torch_m_whole_rounds: bool = False
    """torch's class runs micro-batches in whole rounds of pp (its interleaved schedules)."""
    frameworks: tuple[tuple[str, str], ...] = ()
    """(framework, the framework's name for this schedule) for each of `export.FRAMEWORKS` that runs it;
    torchtitan's is torch's `get_schedule_class` name (docs/ecosystem.md §2.3), nanotron's its `pp_engine`."""
    sweep_preference: int
    """Order in which `sweep` tries schedules on a structure's first try (lowest first; unique)."""
    sweep_default: bool = True
    """In the sweep's default space (otherwise only with `--fix parallel.pp_schedule=...`)."""
    sweep_note: str = ""
    """Why the schedule is outside the sweep's default space."""

    # ------------------------------------------------------------------ what it is defined for

    def vpp_error(self, vpp: int) -> str | None:
        """Why `vpp` chunks per rank do not fit the schedule (None: they do)."""
        if self.vpp is not None and vpp != self.vpp:
            return f"{self.name} needs vpp = {self.vpp}, got {vpp}"
        if self.vpp is None and vpp < self.min_vpp:
            return f"{self.name} needs vpp >= {self.min_vpp}, got {vpp}"
        return None

    def microbatch_error(self, pp: int, m: int) -> str | None:
        """Why `m` micro-batches over `pp` ranks do not fit the schedule (None: they do)."""
        if m % self.routes:
            return f"{self.name} needs an even number of micro-batches (half through each model copy), got {m}"
        if self.m_multiple_of_pp and m % pp:
            return f"{self.name} needs micro-batches ({m}) to be a multiple of pp ({pp})"
        if m < self.min_m_per_pp * pp:
            return f"{self.name} needs at least {self.min_m_per_pp}*pp = {self.min_m_per_pp * pp} micro-batches, got {m}"
        return None

    def pp_error(self, pp: int) -> str | None:
        """Why `pp` ranks do not fit the schedule (None: they do)."""
        return f"{self.name} needs an even pp (rank r pairs with rank pp-1-r), got {pp}" if self.pp_even and pp % 2 else None

    def check(self, pp: int, vpp: int, m: int) -> str | None:
        """Why (pp, vpp, m) is not a combination the schedule is defined for (None: it is)."""
        if pp < 1 or m < 1:
            return f"pp = {pp} and m = {m} must be >= 1"
        return self.pp_error(pp) or self.vpp_error(vpp) or self.microbatch_error(pp, m)

    def vpp_candidates(self, layers_per_rank: int) -> list[int]:
        """Chunk counts the sweep tries for a rank of `layers_per_rank` layers: the fixed one, or every
        divisor >= `min_vpp` (smallest first)."""
        if self.vpp is not None:
            return [self.vpp]
        return [v for v in range(self.min_vpp, layers_per_rank + 1) if layers_per_rank % v == 0]

    # ------------------------------------------------------------------ placement and communication

    def place(self, pp: int, chunk: int) -> tuple[int, int]:
        """(pp rank, local chunk index on that rank) of pipeline chunk `chunk` (see `v_shaped`)."""
        if self.v_shaped:
            return (chunk, 0) if chunk < pp else (2 * pp - 1 - chunk, 1)
        return chunk % pp, chunk // pp

    def chunk_rank(self, pp: int, vpp: int, chunk: int) -> int:
        """Pipeline rank that holds `chunk` (ValueError outside 0..pp*vpp-1)."""
        if not 0 <= chunk < pp * vpp:
            raise ValueError(f"chunk {chunk} outside 0..{pp * vpp - 1}")
        return self.place(pp, chunk)[0]

    def framework_name(self, framework: str) -> str | None:
        """The framework's name for this schedule; None where the framework does not run it."""
        return dict(self.frameworks).get(framework)

    # ------------------------------------------------------------------ the action lists

    def rank_lists(self, pp: int, vpp: int, m: int) -> list[list[Action]]:
        """Per pipeline rank, the actions in execution order (ValueError where `check` objects)."""
        problem = self.check(pp, vpp, m)
        if problem:
            raise ValueError(problem)
        return [self.actions(r, pp, vpp, m) for r in range(pp)]


# ------------------------------------------------------------------------------- the schedules

def _bw(chunk: int, mb: int) -> list[Action]:
    """A backward that is not split: B and W back to back."""
    return [Action("B", chunk, mb), Action("W", chunk, mb)]


def _afab(rank: int, pp: int, vpp: int, m: int) -> list[Action]:
    """GPipe / all-forward-all-backward (NAR21 §2.2.1): every forward, then every backward in
    micro-batch order (as torch `ScheduleGPipe`)."""
    out = [Action("F", rank, i) for i in range(m)]
    for i in range(m):
        out += _bw(rank, i)
    return out


def _afab_inflight(rank: int, pp: int, vpp: int, m: int) -> list[int]:
    """m: every forward runs before the first backward (NAR21 §2.2.1)."""
    return [m]


def _one_f_one_b(rank: int, pp: int, vpp: int, m: int) -> list[Action]:
    """1F1B / PipeDream-Flush (NAR21 §2.2.1, Megatron `forward_backward_pipelining_without_interleaving`):
    pp-1-rank warm-up forwards, then alternate F and B, then drain the remaining backwards."""
    warm = min(pp - 1 - rank, m)
    out = [Action("F", rank, i) for i in range(warm)]
    for i in range(warm, m):
        out.append(Action("F", rank, i))
        out += _bw(rank, i - warm)
    for i in range(m - warm, m):
        out += _bw(rank, i)
    return out


def _one_f_one_b_order(rank: int, pp: int, vpp: int, m: int) -> tuple[list[Action], list[tuple[int, int]], int]:
    """1F1B's forwards and backwards in micro-batch order, pp-1-rank warm-up forwards (`RankOrder`)."""
    return [Action("F", rank, i) for i in range(m)], [(rank, i) for i in range(m)], pp - 1 - rank


def _one_f_one_b_inflight(rank: int, pp: int, vpp: int, m: int) -> list[int]:
    """min(p - i, m) on rank i: its p-1-i warm-up forwards and the first steady one (NAR21 §2.2.1). ZB-H1
    holds the same (ZB Table 2); the smaller stash a split backward keeps from B until W is not counted."""
    return [min(pp - rank, m)]


def interleaved_order(rank: int, pp: int, vpp: int, m: int) -> tuple[list[Action], list[tuple[int, int]], int]:
    """Megatron-core's interleaved order (`get_pp_rank_microbatches`, `get_schedule_table` with
    microbatch_group_size_per_vp_stage = pp): the rank's forwards in order, its backwards' (chunk, mb) in
    order (micro-batches in groups of pp per local chunk, local chunks reversed for the backwards), and
    its warm-up forwards (pp-rank-1)*2 + (vpp-1)*pp, uncapped."""
    order = [(mb, local) for g in range(0, m, pp) for local in range(vpp) for mb in range(g, g + pp)]
    fwd = [Action("F", local * pp + rank, mb) for mb, local in order]
    bwd = [((vpp - 1 - local) * pp + rank, mb) for mb, local in order]
    return fwd, bwd, (pp - rank - 1) * 2 + (vpp - 1) * pp


def _interleaved(rank: int, pp: int, vpp: int, m: int) -> list[Action]:
    """Interleaved 1F1B (NAR21 §2.2.2) in Megatron-core's order (`interleaved_order`): warm-up forwards
    capped at m*vpp; then 1F1B; then drain."""
    fwd, bwd, warm = interleaved_order(rank, pp, vpp, m)
    total = m * vpp
    warm = min(warm, total)
    out = fwd[:warm]
    for k in range(warm, total):
        out.append(fwd[k])
        out += _bw(*bwd[k - warm])
    for k in range(total - warm, total):
        out += _bw(*bwd[k])
    return out


def _interleaved_inflight(rank: int, pp: int, vpp: int, m: int) -> list[int]:
    """Megatron's warm-up W = 2(p-i-1) + (v-1)p forwards plus the first steady one, capped at m*v, spread
    over local chunks in groups of p micro-batches (`get_pp_rank_microbatches`); rank 0 holds
    p + (p-1)/v micro-batch-equivalents (KOR22 §4.2.3)."""
    held = min(2 * (pp - rank - 1) + (vpp - 1) * pp + 1, m * vpp)
    return [sum(1 for k in range(held) if (k // pp) % vpp == local) for local in range(vpp)]


def _zb_h1(rank: int, pp: int, vpp: int, m: int) -> list[Action]:
    """ZB-H1 (Qi et al., ICLR'24 "Zero Bubble Pipeline Parallelism" §3.1, Fig. 3): 1F1B's F/B order
    with the backward split into B and W. Rank r runs its first r B's without their W; from then on
    each B is followed by the oldest waiting W, so r W's stay queued and fill the cool-down bubble,
    which is longer the later the rank (as torch `ScheduleInterleavedZeroBubble` with one stage per
    rank). Bubble (p-1)(T_F+T_B-T_W) for T_W <= T_B; activations as 1F1B (ZB Table 2)."""
    lane = Lane()
    warm = min(pp - 1 - rank, m)

    def backward() -> None:
        lane.b(rank, defer_w=True)
        if lane.count("B", rank) > rank:
            lane.w()

    for _ in range(warm):
        lane.f(rank)
    for _ in range(m - warm):
        lane.f(rank)
        backward()
    for _ in range(warm):
        backward()
    while lane.w():
        pass
    return lane.actions


def _zbv(rank: int, pp: int, vpp: int, m: int) -> list[Action]:
    """ZB-V (Qi et al., arXiv:2401.10241 §6; sail-sg `handcrafted_zb_v.py`, torch
    `ScheduleZBVZeroBubble`): V-shaped 2 chunks per rank, hand-built for T_F = T_B = T_W.
    Warm-up 2(pp-rank)-1 forwards of the down chunk, rank times (F up, F down), then pp-rank times
    (F up, B+W up); steady (F down, B+W down, F up, B+W up); cool-down rank times (B down, B up) and
    pp-rank times (B down, oldest W down) with W's deferred, then the waiting W's, up chunk first.
    Built for max(m, 2pp-1) micro-batches, then the ones >= m are dropped (as the reference does),
    which keeps every order dependency-safe."""
    down, up = rank, 2 * pp - 1 - rank
    n = max(m, 2 * pp - 1)
    lane = Lane()
    for _ in range(2 * (pp - rank) - 1):
        lane.f(down)
    for _ in range(rank):
        lane.f(up)
        lane.f(down)
    for _ in range(pp - rank):
        lane.f(up)
        lane.b(up)
    while lane.count("F", up) < lane.count("F", down) or lane.count("F", down) < n:
        if lane.count("F", down) < n:
            lane.f(down)
        lane.b(down)
        lane.f(up)
        lane.b(up)
    for _ in range(rank):
        lane.b(down, defer_w=True)
        lane.b(up, defer_w=True)
    for _ in range(pp - rank):
        lane.b(down, defer_w=True)
        lane.w(down)
    while lane.w(up):
        pass
    while lane.w(down):
        pass
    return [a for a in lane.actions if a.mb < m]


def _zbv_inflight(rank: int, pp: int, vpp: int, m: int) -> list[int]:
    """2p chunk-passes per rank, the ZB-V scheduler's memory cap (sail-sg `zbv.py`: max_mem =
    2 * n_stage * f_mem), i.e. 1x of 1F1B (ZB README): 2p-i-1 on the down chunk, i+1 on the up chunk."""
    return [min(2 * pp - rank - 1, m), min(rank + 1, m)]


# ------------------------------------------------------------------------------- the registry

V_NOTE = "V-shaped placement: two chunks per pp rank"

SCHEDULES: dict[str, ScheduleSpec] = {s.name: s for s in (
    ScheduleSpec(name="afab", actions=_afab, inflight=_afab_inflight, torch_class="ScheduleGPipe",
                 frameworks=(("torchtitan", "GPipe"), ("nanotron", "afab")),
                 sweep_preference=5, sweep_default=False, sweep_note="same bubble as 1f1b, more activations"),
    ScheduleSpec(name="1f1b", actions=_one_f_one_b, inflight=_one_f_one_b_inflight, p2p_in_steady_state=True,
                 combined_order=_one_f_one_b_order, combined_needs_pp1=True,
                 torch_class="Schedule1F1B", torch_m_at_least_pp=True,
                 frameworks=(("torchtitan", "1F1B"), ("megatron", "1F1B"), ("nanotron", "1f1b")), sweep_preference=0),
    ScheduleSpec(name="interleaved-1f1b", actions=_interleaved, inflight=_interleaved_inflight, vpp=None, min_vpp=2,
                 m_multiple_of_pp=True, torch_class="ScheduleInterleaved1F1B", torch_m_whole_rounds=True,
                 combined_order=interleaved_order,
                 frameworks=(("torchtitan", "Interleaved1F1B"), ("megatron", "interleaved 1F1B")), sweep_preference=2),
    # torchtitan has no ZB-H1 (its InterleavedZeroBubble wants several stages per rank); calibrate replay
    # runs that class with one stage per rank (ZB-H1-like: B and W split, W fills the bubble)
    ScheduleSpec(name="zb-h1", actions=_zb_h1, inflight=_one_f_one_b_inflight, splits_backward=True,
                 torch_class="ScheduleInterleavedZeroBubble", torch_m_whole_rounds=True, sweep_preference=1),
    ScheduleSpec(name="zbv", actions=_zbv, inflight=_zbv_inflight, vpp=2, vpp_note=V_NOTE, v_shaped=True,
                 splits_backward=True, torch_class="ScheduleZBVZeroBubble",
                 frameworks=(("torchtitan", "ZBVZeroBubble"),), sweep_preference=3),
    ScheduleSpec(name="dualpipev", actions=dualpipev_actions, inflight=dualpipev_inflight, vpp=2, vpp_note=V_NOTE,
                 v_shaped=True, splits_backward=True, min_m_per_pp=2, torch_class="ScheduleDualPipeV",
                 frameworks=(("torchtitan", "DualPipeV"),), sweep_preference=4),
    ScheduleSpec(name="dualpipe", actions=dualpipe_actions, inflight=dualpipe_inflight, vpp=2,
                 vpp_note="two copies of the model: each pp rank holds one stage of each", v_shaped=True, routes=2,
                 splits_backward=True, min_m_per_pp=2, pp_even=True, shares_edge_tables=True, sweep_preference=6, sweep_default=False,
                 sweep_note="DeepSeek's own schedule, no framework here runs it: two copies of the parameters"),
)}
"""Every pipeline schedule by its contract name, in the contract's order (`parallel.pp_schedule`).
Read only: the scenario's choices, the sweep's space and the exports all come from here."""

INTERLEAVED = "interleaved-1f1b"
"""The schedule model chunks (vpp >= 2) get where the scenario names none and the framework runs it."""

DEFAULT_SCHEDULE = "1f1b"
"""The contract's default `parallel.pp_schedule`, also what the sweep lists for a layout without a pipeline."""

SCHEDULE_ALIASES: dict[str, str] = {
    spelling(alias): spec.name for spec in SCHEDULES.values()
    for alias in (spec.name, *(n for _, n in spec.frameworks), *((spec.torch_class,) if spec.framework_name("torchtitan") else ()))}
"""The names users write for a schedule, by `inputs.spelling`: the contract's (`interleaved_1f1b`, `ZB-H1`), each framework's
(torchtitan's `Interleaved1F1B`, `GPipe`, `ZBVZeroBubble`; Megatron's `interleaved 1F1B`) and torch's class where torchtitan
runs it (`ScheduleInterleaved1F1B`). Not ScheduleInterleavedZeroBubble: torchtitan's InterleavedZeroBubble runs it with
several stages per rank, which clustersim's zb-h1 is not."""


NOT_MODELLED: dict[str, str] = {}
"""Schedule names users write for schedules clustersim does not price, and what to write instead (the scenario's error)."""


def schedule_alias(text: str) -> str:
    """The contract's name for `text` written as a `SCHEDULE_ALIASES` spelling; `text` itself where none matches."""
    return SCHEDULE_ALIASES.get(spelling(text), text)


def schedule_spec(name: str) -> ScheduleSpec:
    """The registry's spec of schedule `name` (ValueError for an unknown name)."""
    try:
        return SCHEDULES[name]
    except KeyError:
        raise ValueError(f"unknown pipeline schedule {name!r}; one of {', '.join(SCHEDULES)}") from None


def vpp_allowed(name: str) -> str:
    """What `parallel.vpp` may be with schedule `name`, in words (the scenario's error)."""
    spec = schedule_spec(name)
    if spec.vpp is None:
        return f">= {spec.min_vpp} model chunks per pp rank"
    if spec.vpp == 1:
        return f"1 (use {join_names(s.name for s in SCHEDULES.values() if s.vpp != 1)} for chunks)"
    return f"{spec.vpp} ({spec.vpp_note})" if spec.vpp_note else str(spec.vpp)


def splits_backward(name: str) -> bool:
    """True where the upstream gradient may leave when B ends (zero-bubble schedules)."""
    return schedule_spec(name).splits_backward


def chunk_rank(name: str, pp: int, vpp: int, chunk: int) -> int:
    """Pipeline rank that holds `chunk` under schedule `name` (`ScheduleSpec.place`)."""
    return schedule_spec(name).chunk_rank(pp, vpp, chunk)


def check_schedule_args(name: str, pp: int, vpp: int, m: int) -> None:
    """Raise ValueError unless (name, pp, vpp, m) is a combination the schedule is defined for."""
    problem = schedule_spec(name).check(pp, vpp, m)
    if problem:
        raise ValueError(problem)


def pipeline_schedule(name: str, pp: int, vpp: int, m: int) -> list[list[Action]]:
    """Per pipeline rank, the actions in execution order."""
    return schedule_spec(name).rank_lists(pp, vpp, m)
