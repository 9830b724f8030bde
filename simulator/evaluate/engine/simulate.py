"""`simulate_engine`: scenario -> plan -> simulated ranks -> `EngineResult` (+ trace and plots).

Representative mode (default) simulates one rank per pipeline stage: TP/CP/EP/DP peers of a stage run
the same ops at the same times on a homogeneous cluster, so their collectives' rendezvous is immediate
and one member stands for the group (its collectives are still priced on the real group shape). PP
pairs and the tied-embedding pair connect different stages and stay real rendezvous.
Full mode (`full=True`) simulates every rank with its real groups from `layout.group_ranks`: DP/ZeRO
collectives are rendezvous of all dp_cp (or edp) members, each pass with in-pass TP/CP/EP collectives
starts with a rendezvous of the rank's TP/CP/EP group (the collectives inside it then run in lockstep),
and PP sends go to the same (tp, cp, dp) coordinates of the next stage. `cluster.stragglers` / `slow_gpus`
(and `rank_speed` in full mode: {global rank: compute-time multiplier}) make GPUs slower: in full mode a pass
runs at the pace of the slowest member of its TP/CP/EP group; in representative mode each stage's
representative runs at its stage's slowest GPU's pace (`plan/stage_speed.py`).
Link sharing between concurrent transfers (`links.py`) is on by default; `contention=False` prices
every transfer alone (each gets its full share of its links whatever else is in flight).
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path


from ...plan.layout import chunk_owner, group_ranks, group_shape, last_chunk, pair_shape, pp_rank_of_stage_rank, rank_index
from ...plan.memory import buffer_bytes, buffers_total, chunk_activation_bytes, static_bytes, zero_groups
from ...scenario import Scenario
from ...plan.lower import build_plan
from ...plan.paces import heterogeneous, pair_variants, rank_paces, stage_paces
from ...stragglers import rank_speeds
from ..results import EngineResult, summarize
from .sim import Engine
from .state import RankState, Recorder


def _static(sc: Scenario) -> list[float]:
    """Per stage: weights + grads + optimizer states + buffers (memory.py), held through the step."""
    groups = zero_groups(sc)
    out = []
    for r in range(sc.parallel.pp):
        st = static_bytes(sc, r, groups=groups)
        out.append(sum(st.values()) + buffers_total(buffer_bytes(sc, r, groups=groups)))
    return out


def _representative(sc: Scenario, emb_stage: int, head_stage: int, pool=None) -> tuple[list[RankState], dict]:
    pp = sc.parallel.pp
    paces = stage_paces(sc, pool=pool)  # each stage at its slowest member's pace (plan/paces.py)
    ranks = [RankState(s, pp_rank_of_stage_rank(sc, s), s, paces[s]) for s in range(pp)]
    shapes = {}
    for rk in ranks:
        rk.groups = {"dp_cp": (rk.idx,), "edp": (rk.idx,), "dp_rep": (rk.idx,), "embd": (emb_stage, head_stage)}
        rk.pp_peer = {s: s for s in range(pp)}
        rk.rec = Recorder()
    for a in ranks:
        for b in ranks:
            shapes[(a.idx, b.idx)] = pair_shape(sc, a.grank, b.grank)
    return ranks, shapes


class _Union:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, xs) -> None:
        root = self.find(xs[0])
        for x in xs[1:]:
            r = self.find(x)
            if r != root:
                self.parent[r] = root


def _groups_of(sc: Scenario, dim: str) -> list[tuple[int, ...]]:
    """Each rank's group of `dim`, from `layout.group_ranks`, computed once per distinct group."""
    out: list = [None] * sc.gpus
    for r in range(sc.gpus):
        if out[r] is None:
            members = tuple(group_ranks(sc, dim, r))
            for x in members:
                out[x] = members
    return out


def _full(sc: Scenario, emb_stage: int, head_stage: int, speed: dict) -> tuple[list[RankState], dict]:
    stage_of = rank_index(sc, "pp")
    pp_groups = _groups_of(sc, "pp")
    dp_cp, edp, dp_rep = _groups_of(sc, "dp_cp"), _groups_of(sc, "edp"), _groups_of(sc, "dp_rep")
    uf = _Union(sc.gpus)
    for dim in ("tp", "cp") + (("ep",) if sc.model.moe is not None and sc.parallel.ep > 1 else ()):
        for members in set(_groups_of(sc, dim)):
            uf.union(members)
    sync: dict = {}
    for r in range(sc.gpus):
        sync.setdefault(uf.find(r), []).append(r)
    reps = {pp_rank_of_stage_rank(sc, s) for s in range(sc.parallel.pp)}
    peers = [tuple(sync[uf.find(r)]) for r in range(sc.gpus)]
    in_pass = {d: _groups_of(sc, d) for d in ("tp", "cp", "ep", "dp")} if heterogeneous(sc) else {}
    if in_pass:
        in_pass["embd"] = [(pp_groups[r][emb_stage], pp_groups[r][head_stage]) for r in range(sc.gpus)]
    paces = rank_paces(sc, [max(float(speed.get(x, 1.0)) for x in peers[r]) for r in range(sc.gpus)],
                       {"dp_cp": dp_cp, "edp": edp, "dp_rep": dp_rep, **in_pass}, peers)
    ranks = []
    for r in range(sc.gpus):
        members = peers[r]
        rk = RankState(r, r, int(stage_of[r]), paces[r])
        pg = pp_groups[r]
        rk.groups = {"dp_cp": dp_cp[r], "edp": edp[r], "dp_rep": dp_rep[r], "embd": (pg[emb_stage], pg[head_stage])}
        if len(members) > 1:
            rk.groups["sync"] = members
        rk.pp_peer = {s: pg[s] for s in range(len(pg))}
        rk.rec = Recorder() if r in reps else None
        ranks.append(rk)
    return ranks, _LazyPairs(sc)


class _PairLinks(dict):
    """(idx_a, idx_b) -> the links of a PP pair (`plan/paces.pair_variants`: of stages, or of global ranks)."""

    def __init__(self, sc: Scenario, stages: bool, pool: int | None = None):
        super().__init__()
        self.sc, self.stages, self.pool = sc, stages, pool

    def __missing__(self, key):
        v = self[key] = pair_variants(self.sc, key[0], key[1], self.stages, self.pool)
        return v


class _LazyPairs(dict):
    """(idx_a, idx_b) -> GroupShape, computed on first use (full mode has many pairs)."""

    def __init__(self, sc: Scenario):
        super().__init__()
        self.sc = sc

    def __missing__(self, key):
        v = self[key] = pair_shape(self.sc, key[0], key[1])
        return v


def run_engine(sc: Scenario, cost, *, full: bool = False, rank_speed: dict | None = None, steps: int = 1,
               record_slices: bool = True, contention: bool = True, pool: int | None = None,
               replica_micro_batches: tuple | None = None) -> tuple[Engine, list[float]]:
    """Lower and simulate; returns the engine (ranks with their accumulators and recorders) and the
    per-stage static memory."""
    if rank_speed and not full:
        raise ValueError("rank_speed needs full=True: representative mode takes the scenario's stragglers")
    act: dict = {}

    def act_bytes(r: int, c: int) -> float:
        if (r, c) not in act:
            act[(r, c)] = chunk_activation_bytes(sc, r, c)
        return act[(r, c)]

    plan = build_plan(sc, act_bytes)
    emb_stage, head_stage = chunk_owner(sc, 0)[0], chunk_owner(sc, last_chunk(sc))[0]
    if full:
        slow = rank_speeds(sc.cluster.stragglers, sc.cluster.slow_gpus, sc.gpus, sc.gpus_per_node)
        ranks, pairs = _full(sc, emb_stage, head_stage, {**slow, **(rank_speed or {})})
        if replica_micro_batches:  # dp_balance speed: each replica its own program (its micro-batch count)
            dp_of = rank_index(sc, "dp")
            t = sc.training
            plans = {m: build_plan(replace(sc, training=replace(t, global_batch=sc.dp * t.micro_batch * m)), act_bytes)
                     for m in set(replica_micro_batches)}
            for rk in ranks:
                rk.plan = plans[replica_micro_batches[int(dp_of[rk.grank])]]
    else:
        ranks, pairs = _representative(sc, emb_stage, head_stage, pool)
    shapes = {"dp_cp": group_shape(sc, "dp_cp"), "edp": group_shape(sc, "edp"), "dp_rep": group_shape(sc, "dp_rep"),
              "embd": pair_shape(sc, pp_rank_of_stage_rank(sc, emb_stage), pp_rank_of_stage_rank(sc, head_stage))}
    links = _PairLinks(sc, not full, pool) if heterogeneous(sc) else None
    eng = Engine(plan, cost, ranks, pairs, shapes, steps=steps, record_slices=record_slices, contention=contention,
                 pp_links=links)
    eng.run()
    return eng, _static(sc)


def simulate_engine(sc: Scenario, cost, *, full: bool = False, trace_path=None, plot_path=None, memory_plot_path=None,
                    rank_speed: dict | None = None, contention: bool = True, pool: int | None = None,
                    replica_micro_batches: tuple | None = None) -> EngineResult:
    """Simulate one training step of `sc` on the discrete-event engine (module docstring); `pool`: the
    representatives of that pool's DP replicas (one class per pool), representative mode only."""
    t0 = time.perf_counter()
    eng, static = run_engine(sc, cost, full=full, rank_speed=rank_speed, contention=contention, pool=pool,
                             replica_micro_batches=replica_micro_batches)
    res = summarize(sc, eng.ranks, static, events=eng.env.processed, wall_s=time.perf_counter() - t0, full=full,
                    links=eng.links)
    traced = [rk for rk in eng.ranks if rk.rec is not None]
    if trace_path:
        from .trace import write_trace  # noqa: PLC0415 (only when asked)
        write_trace(Path(trace_path), sc, eng, traced, static)
    if plot_path:
        from .plot import plot_timeline  # noqa: PLC0415
        plot_timeline(Path(plot_path), sc, eng, traced, res)
    if memory_plot_path:
        from .plot import plot_memory  # noqa: PLC0415
        eng2, _ = run_engine(sc, cost, full=False, steps=2, record_slices=False, contention=contention, pool=pool)
        plot_memory(Path(memory_plot_path), sc, eng2)
    return res
