"""What `calibrate replay` will run, checked before any process starts.

`plan_replay(sc, options)` turns a validated `Scenario` into a frozen `ReplayPlan`: the device and
backend, the world size, the torch pipeline schedule, the compute dtype and the measuring options.
Everything the executor cannot do on this machine is a `ScenarioError` here (exit code 2, one line),
so a bad plan never spawns a process. The executor itself is in `train.py`; the launcher in
`launch.py`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Optional

from simulator.errors import ScenarioError
from simulator.scenario import Scenario
from simulator.plan.schedules import schedule_spec

MAX_CPU_RANKS = 8
"""More CPU processes than this on one host only measures the scheduler; refuse (issue 6)."""

OPTIMIZER_IMPL = "for_loop"
"""How the executor steps AdamW (train.py `_optimizer`): one tensor at a time, since a rank may hold plain tensors
and DTensors on different meshes side by side, which foreach cannot group. The prediction prices the same
implementation (`as_replayed`)."""


def as_replayed(sc: Scenario) -> Scenario:
    """`sc` as the executor runs it, for the simulator's prediction: AdamW as `OPTIMIZER_IMPL`, whatever the
    scenario's framework steps it with."""
    return replace(sc, training=replace(sc.training, optimizer_impl=OPTIMIZER_IMPL))


DEFAULT_RTOL = {"fp32": 1e-4, "bf16": 2e-2}
"""Per-step loss tolerance against the single-process reference. fp32: the differences are
summation order only (measured ~1e-6 relative over a few steps, see README); bf16: rounding."""


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    """Command-line knobs (cli.py); none of them changes what is trained."""
    steps: int = 6
    """Optimizer steps whose losses are compared (warm-up steps included)."""
    warmup: int = 2
    """Steps left out of the timing median."""
    seed: int = 1234
    lr: float = 1e-3
    device: str = "auto"
    """auto (cpu-host topology -> cpu, else cuda) | cpu | cuda."""
    threads: Optional[int] = None
    """torch intra-op threads per rank; null = cores / ranks (at least 1)."""
    timeout_s: float = 900.0
    """Whole-run limit enforced by the parent's watchdog."""
    torch_trace: Optional[str] = None
    """Write a torch.profiler trace of one extra step per rank (FILE -> FILE.rank<r>.json)."""
    rtol: Optional[float] = None
    """Loss tolerance; null = DEFAULT_RTOL for the compute dtype."""
    reference: bool = True
    """Run the single-process reference and compare losses."""
    fault: Optional[tuple[str, int]] = None
    """Test hook, not on the command line: ("raise" | "exit" | "hang", rank) makes that rank fail after
    its first step, to check that the launcher stops the world with a clear error."""


@dataclass(frozen=True, kw_only=True)
class ReplayPlan:
    scenario: Scenario
    options: ReplayOptions
    device: str
    """cpu | cuda"""
    backend: str
    """gloo | nccl"""
    world: int
    dtype: str
    """Compute dtype: fp32 (CPU, or fp32 scenarios) | bf16 (autocast / FSDP2 param dtype on GPU)."""
    threads: int
    schedule: Optional[str]
    """torch.distributed.pipelining class name; None when pp == 1."""
    rtol: float
    notes: tuple[str, ...] = field(default=())
    """Things the user should know (printed on stderr and kept in the JSON)."""

    @property
    def micro_batches(self) -> int:
        return self.scenario.micro_batches


def _fail(path: str, problem: str, allowed: str | None = None) -> None:
    raise ScenarioError(path, f"replay: {problem}", allowed)


def _available_gpus() -> int:
    try:
        import torch
    except ImportError:  # the simulator side may run without torch; replay needs it
        _fail("calibrate replay", "needs torch (pip install .[calibrate])")
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _check_model(sc: Scenario) -> None:
    m, p = sc.model, sc.parallel
    if m.arch != "llama":
        _fail("model.arch", f"{m.arch!r}: the executor builds Llama-style models only", "llama (dense or MoE)")
    if m.mla is not None:
        _fail("model", "multi-head latent attention (MLA) is not implemented by the executor", "a GQA model")
    if m.positions:
        _fail("model.positions", "learned positions are not implemented (the executor uses RoPE)", "0")
    if m.tie_embeddings and (p.pp > 1 or p.tp > 1):
        _fail("model.tie_embeddings", "tied embeddings cannot be split by tp or pp here", "false, or tp=pp=1")
    if p.tp > 1 and m.n_kv % p.tp:
        _fail("parallel.tp", f"{p.tp} does not divide kv_heads {m.n_kv} (the executor does not replicate K/V heads)",
              "a divisor of kv_heads")
    if m.moe and p.tp > 1:
        _fail("parallel.tp", f"{p.tp} with an MoE model: expert tensor parallelism is not implemented", "tp=1 for MoE models")
    if m.d_head % 2:
        _fail("model.head_dim", f"{m.d_head} is odd; RoPE needs an even head size")


def _check_layout(sc: Scenario) -> None:
    p = sc.parallel
    order = [d for d in p.order.split("-") if d != "ep"]
    if p.cp > 1 and sc.dp > 1 and abs(order.index("cp") - order.index("dp")) != 1:
        _fail("parallel.order", f"{p.order!r}: cp and dp must be neighbours for the gradient (dp x cp) mesh",
              "e.g. tp-cp-ep-dp-pp")
    m, spec = sc.micro_batches, schedule_spec(p.pp_schedule)
    if p.pp > 1 and spec.torch_class is None:
        _fail("parallel.pp_schedule", f"{p.pp_schedule} has no torch.distributed.pipelining class to replay it",
              "a schedule with a torch class (schedules.ScheduleSpec.torch_class)")
    if p.pp > 1 and spec.torch_m_at_least_pp and m < p.pp:
        _fail("training.global_batch", f"torch's {spec.torch_class} needs at least pp = {p.pp} micro-batches, got {m}",
              f"global_batch >= {p.pp} * dp * micro_batch")
    if p.pp > 1 and spec.torch_m_whole_rounds and m % max(1, m // p.pp):
        _fail("training.global_batch", f"{p.pp_schedule} in torch needs micro-batches ({m}) in whole rounds of pp = {p.pp}",
              "a multiple of pp micro-batches")


def _check_world(sc: Scenario, device: str, world: int) -> list[str]:
    notes = []
    if device == "cpu":
        if world > MAX_CPU_RANKS:
            _fail("cluster", f"{world} ranks; on CPU at most {MAX_CPU_RANKS} processes", f"nodes x gpus_per_node <= {MAX_CPU_RANKS}")
        cores = os.cpu_count() or 1
        if world > cores:
            notes.append(f"{world} ranks on {cores} cores: this will be slow and the timings mostly measure the OS scheduler")
    else:
        have = _available_gpus()
        if have == 0:
            _fail("cluster.topology", f"{sc.topology.name} needs CUDA GPUs and this machine has none",
                  "a cpu-host scenario, or --device cpu to check losses only")
        if world > have and "WORLD_SIZE" not in os.environ:
            _fail("cluster", f"{world} ranks but this machine has {have} GPUs (multi-node: launch with torchrun)",
                  f"nodes x gpus_per_node <= {have}")
    env_world = os.environ.get("WORLD_SIZE")
    if env_world is not None and int(env_world) != world:
        _fail("cluster", f"the scenario has {world} ranks but torchrun started WORLD_SIZE={env_world}", f"{env_world} ranks")
    return notes


def plan_replay(sc: Scenario, options: ReplayOptions) -> ReplayPlan:
    """Check that this machine can run the scenario's plan and fix how (raises ScenarioError)."""
    o = options
    if o.steps < 1 or o.warmup < 0 or o.warmup >= o.steps:
        _fail("--steps", f"steps={o.steps}, warmup={o.warmup}", "steps >= 1 and 0 <= warmup < steps")
    device = o.device
    if device == "auto":
        device = "cpu" if sc.topology.node.interconnect == "host" else "cuda"
    if device not in ("cpu", "cuda"):
        _fail("--device", repr(device), "auto | cpu | cuda")
    notes: list[str] = []
    _check_model(sc)
    _check_layout(sc)
    world = sc.gpus
    notes += _check_world(sc, device, world)
    precision = sc.training.precision
    if precision not in ("fp32", "bf16"):  # fp8 / fp4 casts, fp16's loss scaler
        _fail("training.precision", f"{precision} is not implemented by the executor", "fp32 | bf16")
    dtype = precision if device == "cuda" else "fp32"
    if device == "cpu" and precision != "fp32":
        notes.append(f"training.precision {precision}: CPU runs compute in fp32 (the prediction still assumes {precision})")
    if dtype == "bf16" and sc.parallel.zero == 0 and not sc.training.autocast:
        notes.append("training.autocast is false but the executor trains bf16 without ZeRO through torch.autocast "
                     "(fp32 weights, cached bf16 copies): set training.autocast: true for the prediction to describe it")
    if sc.cluster.nodes > 1 and "WORLD_SIZE" not in os.environ:
        _fail("cluster.nodes", f"{sc.cluster.nodes} nodes: one command starts one node", "nodes: 1, or launch every node with torchrun")
    threads = o.threads or max(1, (os.cpu_count() or 1) // world)
    schedule = schedule_spec(sc.parallel.pp_schedule).torch_class if sc.parallel.pp > 1 else None
    rtol = o.rtol if o.rtol is not None else DEFAULT_RTOL[dtype]
    return ReplayPlan(scenario=sc, options=o, device=device, backend="gloo" if device == "cpu" else "nccl",
                      world=world, dtype=dtype, threads=threads, schedule=schedule, rtol=rtol, notes=tuple(notes))
