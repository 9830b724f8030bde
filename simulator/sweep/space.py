"""The sweep's search space: the layouts a scenario admits (`enumerate_layouts`, `--fix`) and the cheap
model-state bound that drops those that cannot fit. `sweep.py` searches it."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Any, Iterable


from ..cluster_mix import replica_pools
from ..ep_spec import ep_overlap_problem, expert_tp_problem
from ..offload_spec import offload_problem
from ..errors import ScenarioError
from ..plan.memory import GIB, training_state_bytes
from ..params import all_layer_ids, layer_params, total_params
from ..inputs import parse_yaml, short
from ..scenario import MAX_GPUS, Scenario
from ..plan.schedules import DEFAULT_SCHEDULE, SCHEDULES, schedule_spec

# ----------------------------------------------------------------------------------- search space

SWEEP_KEYS = {
    "parallel.dp": "dp", "parallel.tp": "tp", "parallel.pp": "pp", "parallel.cp": "cp", "parallel.ep": "ep",
    "parallel.zero": "zero", "parallel.sp": "sp", "parallel.pp_schedule": "pp_schedule", "parallel.vpp": "vpp",
    "training.micro_batch": "micro_batch", "training.recompute": "recompute", "parallel.pp_balance": "pp_balance",
    "parallel.dp_balance": "dp_balance",
}
"""Keys `--fix` restricts (dotted scenario path -> Layout field); the short name is accepted too."""
RECOMPUTE_ORDER = ("none", "selective", "full")
"""Lightest first: for one layout, a heavier mode never runs faster (it only adds forward work)."""
ZERO_ORDER = (1, 2, 3, 0)
"""Preference when a structure is first tried: ZeRO-1 costs no more communication than plain DP
(reduce-scatter + all-gather vs all-reduce, ZeRO §7.2.1) with a sharded optimizer step; 2 and 3 only
if memory needs them; 0 holds the most memory, so it is tried last."""
# Schedules: the registry's `ScheduleSpec.sweep_preference` orders a structure's first try (1F1B first: it
# holds the fewest activations of the schedules, docs/modeling.md §3.4, except ZB-V, which ties; phase 2 tries
# the others); `sweep_default` False leaves a schedule out unless fixed (AFAB: the same bubble as 1F1B with
# m instead of p micro-batches of activations, docs/modeling.md §6, so it never ranks above 1F1B).
MIN_TOKENS_PER_CP_RANK = 1024
"""Default CP degrees keep at least this many tokens per CP rank: below it the ring's K/V exchange
outlasts each attention step (USP CP section). An assumption that bounds the default space;
`--fix parallel.cp=...` overrides it."""
MAX_DEFAULT_MICRO_BATCH_TOKENS = 65536
"""Default micro-batches hold at most this many tokens (16 sequences of 4096): GEMMs are on their
efficiency plateau long before (docs/modeling.md §7.1) while activations keep growing with it (KOR22);
`--fix training.micro_batch=...` overrides."""
MAX_DEFAULT_TP_NODES = 2
"""Default TP degrees span at most two nodes: TP collectives run once or twice per layer, and beyond a
node they cross the NICs (USP TP section); TP over two nodes stays in the space so the ranking shows
what leaving the node costs. `--fix parallel.tp=...` overrides."""
MAX_DEFAULT_VPP_CHOICES = 3
"""Interleaved 1F1B: the smallest few chunk counts per pp (larger ones only shave a bubble that is
already small and multiply the PP traffic, NAR21 §2.2.2); `--fix parallel.vpp=...` overrides."""
DEFAULT_EXPAND = 12
"""Phase 2 expands at most this many structures (by optimistic time)."""


@dataclass(frozen=True, order=True, slots=True)
class Layout:
    """One candidate: the sweep's keys. Ordering is the deterministic tie-break."""
    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    micro_batch: int
    sp: bool
    zero: int
    pp_schedule: str
    vpp: int
    recompute: str
    pp_balance: str = "even"
    """even | speed (`cost/pp_balance.py`): searched by default where the cluster is not uniform (pools, stragglers,
    degraded links)."""
    dp_balance: str = "even"
    """even | speed (`cost/pp_balance.dp_shares`): searched by default with pools, where each DP replica sits in one
    pool and the pools hold replicas of both kinds."""

    def label(self) -> str:
        parts = [f"TP{self.tp}" + ("+SP" if self.sp and self.tp > 1 else ""), f"PP{self.pp}", f"DP{self.dp}"]
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        parts.append(f"ZeRO-{self.zero}")
        parts.append(f"mb{self.micro_batch}")
        if self.pp > 1:
            parts.append(self.pp_schedule + (f"/v{self.vpp}" if self.vpp > 1 else ""))
        if self.recompute != "none":
            parts.append(f"rc-{self.recompute}")
        if self.pp_balance != "even":
            parts.append(f"{self.pp_balance}-balanced")
        if self.dp_balance != "even":
            parts.append(f"dp-{self.dp_balance}")
        return " ".join(parts)

    def overrides(self) -> dict:
        """The scenario keys this layout sets."""
        return {"parallel": {"dp": self.dp, "tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep,
                             "zero": self.zero, "sp": self.sp, "pp_schedule": self.pp_schedule, "vpp": self.vpp,
                             "pp_balance": self.pp_balance, "dp_balance": self.dp_balance},
                # the sweep's recompute modes are whole-model ones: a scenario's block recompute
                # (training.recompute_layers) does not carry over to the layouts it tries
                "training": {"micro_batch": self.micro_batch, "recompute": self.recompute, "recompute_layers": None}}


def layout_of(sc: Scenario) -> Layout:
    p, t = sc.parallel, sc.training
    return Layout(tp=p.tp, pp=p.pp, cp=p.cp, ep=p.ep, dp=sc.dp, micro_batch=t.micro_batch, sp=p.sp,
                  zero=p.zero, pp_schedule=p.pp_schedule, vpp=p.vpp, recompute=t.recompute, pp_balance=p.pp_balance,
                  dp_balance=p.dp_balance)


def _check_value(key: str, value: Any) -> Any:
    name = SWEEP_KEYS[key]
    if name == "sp":
        if not isinstance(value, bool):
            raise ScenarioError("--fix", f"{key}={short(value)} is not a boolean", "true | false")
    elif name == "pp_schedule":
        if value not in SCHEDULES:
            raise ScenarioError("--fix", f"{key}={short(value)} is not a schedule", " | ".join(SCHEDULES))
    elif name == "recompute":
        if value not in RECOMPUTE_ORDER:
            raise ScenarioError("--fix", f"{key}={short(value)} is not a recompute mode", " | ".join(RECOMPUTE_ORDER))
    elif name in ("pp_balance", "dp_balance"):
        if value not in ("even", "speed"):
            raise ScenarioError("--fix", f"{key}={short(value)} is not a pipeline balance", "even | speed")
    elif name == "zero":
        if value not in (0, 1, 2, 3) or isinstance(value, bool):
            raise ScenarioError("--fix", f"{key}={short(value)} is not a ZeRO stage", "0 | 1 | 2 | 3")
    elif not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_GPUS:
        raise ScenarioError("--fix", f"{key}={short(value)} is not a positive integer", f"integers in 1 .. {MAX_GPUS:,}")
    return value


def parse_fix(texts: Iterable[str]) -> dict[str, tuple]:
    """['parallel.tp=4,8', 'recompute=selective'] -> {'tp': (4, 8), 'recompute': ('selective',)}.
    A key given twice keeps the values both allow."""
    out: dict[str, tuple] = {}
    for text in texts or ():
        key, sep, values = text.partition("=")
        key = key.strip()
        full = key if key in SWEEP_KEYS else next((k for k, v in SWEEP_KEYS.items() if v == key), None)
        if not sep or full is None:
            raise ScenarioError("--fix", f"{short(text)} does not name a sweep key", "KEY=V1,V2 with KEY one of " + ", ".join(SWEEP_KEYS))
        parsed = []
        for item in values.split(","):
            try:
                v = parse_yaml(item.strip(), "--fix") if item.strip() else None
            except ScenarioError:
                v = item.strip()
            parsed.append(_check_value(full, v))
        name = SWEEP_KEYS[full]
        out[name] = tuple(v for v in out[name] if v in parsed) if name in out else tuple(dict.fromkeys(parsed))
        if not out[name]:
            raise ScenarioError("--fix", f"{key}: repeated --fix leaves no value")
    return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tp_ok(sc: Scenario, tp: int) -> bool:
    m = sc.model
    ffn = [m.ffn_hidden] + ([m.moe.expert_ffn_hidden] if m.moe else [])
    kv = m.n_kv
    return m.heads % tp == 0 and (kv % tp == 0 or tp % kv == 0) and all(f % tp == 0 for f in ffn)


def _schedules(sc: Scenario, pp: int, m_micro: int, fixed: dict) -> list[tuple[str, int]]:
    """(schedule, vpp) pairs valid for `pp` pipeline ranks and `m_micro` micro-batches."""
    layers = sc.model.layers
    if pp == 1:  # no pipeline: one schedule stands for all, the most preferred that runs one chunk
        names = [s for s in fixed.get("pp_schedule", (DEFAULT_SCHEDULE,)) if not schedule_spec(s).vpp_error(1)]
        name = min(names, key=lambda s: schedule_spec(s).sweep_preference, default=None)
        return [(name, 1)] if name and 1 in fixed.get("vpp", (1,)) else []
    out = []
    for s in fixed.get("pp_schedule", [n for n, spec in SCHEDULES.items() if spec.sweep_default]):
        spec = schedule_spec(s)
        vpps = spec.vpp_candidates(layers // pp)
        if spec.vpp is None and "vpp" not in fixed:
            vpps = vpps[:MAX_DEFAULT_VPP_CHOICES]
        for v in vpps:
            if "vpp" in fixed and v not in fixed["vpp"]:
                continue
            if not sc.framework.can_split(layers, pp, v):
                continue
            if spec.microbatch_error(pp, m_micro):
                continue
            out.append((s, v))
    return out


def _mixed_replicas(sc: Scenario, tp: int, pp: int, cp: int, dp: int) -> bool:
    """Pools on different DP replicas, each replica inside one pool: where `dp_balance: speed` means something."""
    if not sc.cluster.pools or dp == 1:
        return False
    on = replica_pools(sc.parallel.order, {"tp": tp, "cp": cp, "dp": dp, "pp": pp}, sc.cluster.pools, sc.gpus_per_node)
    return on is not None and len(set(on)) > 1


def enumerate_layouts(sc: Scenario, fixed: dict | None = None) -> list[Layout]:
    """Every layout of `sc`'s model, batch and cluster that passes `validate_layout`'s arithmetic,
    restricted to the `fixed` values, in `Layout` order. Layouts that differ only in keys that have no
    effect are listed once (sp when tp = 1; ZeRO when dp*cp = 1; schedule when pp = 1)."""
    fixed = fixed or {}
    m, t = sc.model, sc.training
    gpus, gb, seq = sc.gpus, t.global_batch, t.seq_len

    def allowed(name, default):
        return [v for v in default if v in fixed[name]] if name in fixed else list(default)

    def extra(name, default):  # fixed values outside the default set are allowed too (validity decides)
        return sorted(set(fixed[name])) if name in fixed else default

    c = sc.cluster
    balances = ["even", "speed"] if (c.pools or c.stragglers or c.slow_gpus or c.degraded_links) else ["even"]
    out = []
    tp_default = [t for t in _divisors(gpus) if t <= MAX_DEFAULT_TP_NODES * sc.gpus_per_node]
    mb_max = max(1, MAX_DEFAULT_MICRO_BATCH_TOKENS // seq)
    for tp in extra("tp", tp_default):
        if gpus % tp or not _tp_ok(sc, tp):
            continue
        for pp in extra("pp", _divisors(gpus // tp)):
            if (gpus // tp) % pp or not sc.framework.can_split(m.layers, pp, 1):
                continue
            cp_default = [c for c in _divisors(gpus // (tp * pp)) if seq // c >= MIN_TOKENS_PER_CP_RANK]
            for cp in extra("cp", cp_default):
                rest = gpus // (tp * pp)
                if rest % cp or (cp > 1 and seq % (2 * cp)):
                    continue
                dp = rest // cp
                if "dp" in fixed and dp not in fixed["dp"]:
                    continue
                ep_default = _divisors(m.moe.experts) if m.moe else [1]
                for ep in extra("ep", ep_default):
                    if ep > 1 and (not m.moe or m.moe.experts % ep or (dp * cp) % ep):
                        continue
                    for sp in allowed("sp", (True, False) if tp > 1 else (False,)):
                        if sp and seq % (tp * cp):
                            continue
                        if expert_tp_problem(m.moe, tp, sp, sc.parallel.order, _etp(sc, tp)):
                            continue  # Megatron's MoE layer: TP needs SP; expert TP on the TP group (ep_spec.py)
                        mbs = [b for b in _divisors(gb // dp) if b <= mb_max] if gb % dp == 0 else []
                        for mb in extra("micro_batch", mbs):
                            if gb % (dp * mb):
                                continue
                            m_micro = gb // (dp * mb)
                            # the stages this framework has, one word per distinct policy (Megatron: 0, 1, 3)
                            zeros = allowed("zero", sc.framework.zero_words(pp) if dp * cp > 1 else (0,))
                            if dp * cp == 1 and "zero" in fixed and not zeros:
                                zeros = [min(fixed["zero"])]  # any stage is plain data parallelism of 1
                            dp_bal = extra("dp_balance", ["even", "speed"] if _mixed_replicas(sc, tp, pp, cp, dp) else ["even"])
                            for s, v in _schedules(sc, pp, m_micro, fixed):
                                for z, rc, bal, dbal in product(zeros, allowed("recompute", RECOMPUTE_ORDER),
                                                                extra("pp_balance", balances if pp > 1 and v == 1 else ["even"]),
                                                                dp_bal):
                                    if sc.parallel.ep_overlap and ep_overlap_problem(ep, pp, s, rc, t.precision, z):
                                        continue  # where Megatron refuses the EP all-to-all overlap (ep_spec.py)
                                    if offload_problem(t.offload_layers, pp, rc):
                                        continue  # activation offloading: pp 1, no recompute (offload_spec.py)
                                    out.append(Layout(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, micro_batch=mb, sp=sp, zero=z,
                                                      pp_schedule=s, vpp=v, recompute=rc, pp_balance=bal, dp_balance=dbal))
    return sorted(out)


def default_space_note(sc: Scenario, fixed: dict) -> str:
    """What the default space leaves out (the keys not given to --fix), in one line."""
    parts = []
    if "tp" not in fixed:
        parts.append(f"TP <= {MAX_DEFAULT_TP_NODES * sc.gpus_per_node} ({MAX_DEFAULT_TP_NODES} nodes)")
    if "micro_batch" not in fixed:
        parts.append(f"micro-batches <= {max(1, MAX_DEFAULT_MICRO_BATCH_TOKENS // sc.training.seq_len)} sequences")
    if "cp" not in fixed:
        parts.append(f"CP keeping >= {MIN_TOKENS_PER_CP_RANK} tokens per rank")
    if "vpp" not in fixed:
        parts.append(f"the {MAX_DEFAULT_VPP_CHOICES} smallest interleaved chunk counts")
    if "pp_schedule" not in fixed:
        parts += [f"no {spec.name} ({spec.sweep_note})" for spec in SCHEDULES.values() if not spec.sweep_default]
    return ("default search space: " + ", ".join(parts) + "; --fix KEY=VALUES widens or narrows it") if parts else "search space as fixed"


# ----------------------------------------------------------------------------------- cheap bound

def _etp(sc: Scenario, tp: int) -> int | None:
    """The expert TP a candidate with `tp` runs: the scenario's own `parallel.etp` where it writes one, else the
    framework's default at that tp (`FrameworkChoice.default_etp`)."""
    if "parallel.etp" in sc.framework.scenario_keys:
        return sc.parallel.etp
    return sc.framework.default_etp(sc.model.moe, tp)


def param_split(sc: Scenario) -> tuple[float, float]:
    """(dense, routed-expert) parameters of the whole model (its MTP modules' layers included, as `total_params`)."""
    experts = float(sum(layer_params(sc.model, i).experts for i in all_layer_ids(sc.model)))
    return total_params(sc.model) - experts, experts


def model_state_floor_gib(sc: Scenario, lay: Layout, split: tuple[float, float]) -> float:
    """A lower bound on the worst stage's weights + grads + optimizer (GiB): the mean over pipeline
    ranks, with dense parameters split by tp and routed experts by ep, whole at every TP rank or split over it
    (`parallel.etp` tp), whichever holds less (replicated norms and K/V heads only add to it; docs/modeling.md §1.4,
    3.1). `split` = `param_split(sc)`."""
    t = sc.training
    dense, experts = split
    d = training_state_bytes(t, lay.zero, lay.dp * lay.cp)
    whole = training_state_bytes(t, lay.zero, lay.dp * lay.cp * lay.tp // lay.ep)
    split_tp = training_state_bytes(t, lay.zero, max(1, lay.dp * lay.cp // lay.ep))
    expert = min(experts / lay.ep * whole.total, experts / (lay.ep * lay.tp) * split_tp.total)
    return (dense / lay.tp * d.total + expert) / lay.pp / GIB
