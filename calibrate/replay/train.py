"""One rank's training run: build its share of the model, train `steps` optimizer steps, measure.

Order of construction (torchtitan's): model chunk(s) for this pipeline rank -> deterministic init by
parameter name -> tensor/sequence parallel (tp.py) -> ZeRO via FSDP2 (zero.py) or bucketed DP all-reduce
(dp.py) -> optimizer -> pipeline schedule (pipeline.py). Context parallelism and expert parallelism
live inside the model (ring_attention.py, experts.py). The single-process reference is the same code
with every degree 1 (`reference_plan`).

Timing: all ranks meet at a barrier, then each times its step (forward, backward, gradient
communication, optimizer); the step time is the slowest rank's. Each rank also keeps the median split
of its step (forward+backward incl. overlapped communication, waiting for the gradient buckets, optimizer)
and the CPU seconds its process used: CPU seconds well below the step time on CPU mean the rank was
waiting, for a peer or for a core another process held. Losses: every rank that owns a distinct
slice of tokens (tp rank 0, on the stage holding the loss) contributes its token-loss sum and one
all-reduce gives the step's mean token loss.
"""
from __future__ import annotations

import contextlib
import resource
import statistics
import time
from dataclasses import replace
from typing import Optional

import torch
import torch.distributed as dist

from simulator.plan.layout import rank_chunks

from .data import global_batch, rank_batch, zigzag_positions
from .dp import BucketedAllReduce
from .experts import GroupedExperts, ep_imbalance
from .host_speed import probe_timer
from .llama import AttentionCore, Transformer, init_weights, token_loss
from .meshes import Meshes
from .pipeline import Pipeline, build_pipeline
from ..probes.optimizer import IMPL_KWARGS
from .plan import OPTIMIZER_IMPL, ReplayPlan
from .tp import apply_tp, reduce_partial_grads
from .zero import apply_zero, set_micro_batch

GIB = 2 ** 30
ADAMW = {"betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
"""Llama 2/3 AdamW settings (Touvron et al. 2023 §2.2)."""


def reference_plan(plan: ReplayPlan) -> ReplayPlan:
    """The same model, data, seed and micro-batch size in one process with no parallelism."""
    sc = plan.scenario
    par = replace(sc.parallel, dp=1, tp=1, pp=1, cp=1, ep=1, zero=0, sp=False, vpp=1, pp_layers=None)
    cluster = replace(sc.cluster, nodes=1, gpus_per_node=1)
    return replace(plan, scenario=replace(sc, parallel=par, cluster=cluster), world=1, schedule=None)


def _coords(meshes: Optional[Meshes]) -> dict:
    return dict(meshes.coords) if meshes else {"tp": 0, "cp": 0, "dp": 0, "pp": 0}


def build_parts(plan: ReplayPlan, meshes: Optional[Meshes], device: torch.device) -> list[tuple[int, Transformer]]:
    """This rank's model chunks [(pipeline chunk index, module)], initialised and TP-sharded."""
    sc = plan.scenario
    p, t, m = sc.parallel, sc.training, sc.model
    c = _coords(meshes)
    positions = zigzag_positions(t.seq_len, p.cp, c["cp"])
    core = AttentionCore(kind=t.attention, recompute=t.recompute == "selective" and t.attention == "eager",
                         cp=meshes.cp if meshes else None, cp_comm=p.cp_comm)
    if p.pp > 1:
        chunks, n = rank_chunks(sc, c["pp"]), p.pp * p.vpp
    else:
        chunks, n = [(0, list(range(m.layers)))], 1
    parts = []
    for chunk, layers in chunks:
        mod = Transformer(m, layer_ids=layers, first=chunk == 0, last=chunk == n - 1, positions=positions, core=core,
                          full_recompute=t.recompute == "full", ep=meshes.ep if meshes else None)
        init_weights(mod, plan.options.seed)
        mod.to(device)
        if meshes is not None and meshes.tp is not None:
            apply_tp(mod, meshes.tp, p.sp)
        parts.append((chunk, mod))
    return parts


def _attach_data_parallel(plan: ReplayPlan, meshes: Optional[Meshes], mods: list[Transformer]) -> Optional[BucketedAllReduce]:
    sc = plan.scenario
    if meshes is None or meshes.grad is None:
        return None
    if sc.parallel.zero >= 1:
        apply_zero(mods, sc.parallel.zero, meshes.grad, expert_parallel=sc.parallel.ep > 1,
                   expert_mesh=meshes.expert_grad, bf16=plan.dtype == "bf16")
        return None
    expert_ids = {id(q) for mod in mods for e in mod.modules() if isinstance(e, GroupedExperts) for q in e.parameters()}
    params = [q for mod in mods for q in mod.parameters()]
    dense = [q for q in params if id(q) not in expert_ids]
    experts = [q for q in params if id(q) in expert_ids]
    groups = [(meshes.grad.get_group(), dense)]
    if experts and meshes.expert_grad is not None:
        if meshes.expert_grad is meshes.grad:
            groups = [(meshes.grad.get_group(), params)]
        else:
            groups.append((meshes.expert_grad.get_group(), experts))
    return BucketedAllReduce.attach(groups, sc.parallel.dp_bucket_mb, sc.micro_batches, overlap=sc.parallel.overlap_dp)


def _optimizer(plan: ReplayPlan, mods: list[Transformer]) -> torch.optim.Optimizer:
    params = list({id(q): q for mod in mods for q in mod.parameters()}.values())
    if plan.scenario.training.optimizer == "sgd":
        return torch.optim.SGD(params, lr=plan.options.lr)
    return torch.optim.AdamW(params, lr=plan.options.lr, **IMPL_KWARGS[OPTIMIZER_IMPL], **ADAMW)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(plan: ReplayPlan, meshes: Optional[Meshes], device: torch.device) -> dict:
    """Run the plan on this rank; every rank returns the same summary (losses, step times, memory)."""
    sc = plan.scenario
    p, t = sc.parallel, sc.training
    distributed = meshes is not None
    torch.manual_seed(plan.options.seed)
    c = _coords(meshes)
    parts = build_parts(plan, meshes, device)
    mods = [mod for _, mod in parts]
    buckets = _attach_data_parallel(plan, meshes, mods)
    opt = _optimizer(plan, mods)
    tokens = t.global_batch * t.seq_len
    positions = zigzag_positions(t.seq_len, p.cp, c["cp"])
    pipe: Optional[Pipeline] = None
    if p.pp > 1:
        pipe = build_pipeline(parts, schedule=plan.schedule, stages_total=p.pp * p.vpp, micro_batches=sc.micro_batches,
                              group=meshes.pp, device=device, loss_fn=lambda out, y: token_loss(out, y, tokens))
    fsdp = distributed and meshes.grad is not None and p.zero >= 1
    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if plan.dtype == "bf16" and not fsdp else contextlib.nullcontext
    mb = t.micro_batch
    sp_grads = distributed and meshes.tp is not None and p.sp

    def one_step(step: int) -> tuple[float, float]:
        inputs, labels = global_batch(plan.options.seed, step, t.global_batch, t.seq_len, sc.model.vocab)
        x, y = rank_batch(inputs, labels, dp=sc.dp, dp_rank=c["dp"], positions=positions)
        x, y = x.to(device), y.to(device)
        _sync(device)
        before = probe() if probe is not None else None
        if distributed:
            dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        local = None
        with amp():
            if pipe is not None:
                local = pipe.step(x, y)
            else:
                local = torch.zeros((), device=device)
                for i in range(sc.micro_batches):
                    if fsdp and p.pp == 1:
                        set_micro_batch(mods, p.zero, last=i == sc.micro_batches - 1)
                    loss = token_loss(mods[0](x[i * mb:(i + 1) * mb]), y[i * mb:(i + 1) * mb], tokens)
                    loss.backward()
                    local = local + loss.detach()
        t1 = time.perf_counter()
        if buckets is not None:
            buckets.finish()
        if sp_grads:
            reduce_partial_grads(mods, meshes.tp)
        t2 = time.perf_counter()
        opt.step()
        _sync(device)
        elapsed = time.perf_counter() - t0
        # host-side phase split (on GPU only the total is synchronised) and this process's CPU seconds
        phases.append((t1 - t0, t2 - t1, t0 + elapsed - t2, time.process_time() - c0))
        if probe is not None:
            probes.append((before, probe()))
        norm = grad_norm(mods, meshes, device)  # untimed; gradients are still there after the step
        opt.zero_grad(set_to_none=True)
        if not distributed:
            return float(local), elapsed, norm
        owner = meshes.loss_owner and local is not None
        vals = torch.stack([local.float() if owner else torch.zeros((), device=device),
                            torch.tensor(float(elapsed), device=device)]).to(torch.float64)
        loss_sum = vals[:1].clone()
        dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)
        slowest = vals[1:].clone()
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return float(loss_sum), float(slowest), norm

    losses, times, norms, phases, probes = [], [], [], [], []
    probe = probe_timer() if device.type == "cpu" else None  # the host's speed around each step (host_speed.py)
    for step in range(plan.options.steps):
        if step == plan.options.warmup and device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        loss, dt, norm = one_step(step)
        _inject_fault(plan, distributed)
        losses.append(loss)
        times.append(dt)
        norms.append(norm)
    imbalance = ep_imbalance(mods, meshes.ep if meshes else None, device)
    peak = torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # Linux: KiB
    if plan.options.torch_trace:  # one more, untimed step: its phases and probes are not the measured steps'
        _profile_step(plan, one_step, device, dist.get_rank() if distributed else 0)
        del phases[len(times):], probes[len(times):]
    split = [statistics.median(col) for col in zip(*phases[plan.options.warmup:])]
    mine = (peak, rss, {"forward_backward_s": split[0], "grad_sync_wait_s": split[1], "optimizer_s": split[2],
                        "cpu_s": split[3]}, probes or None)
    per_rank = [mine]
    if distributed:
        per_rank = [None] * dist.get_world_size()
        dist.all_gather_object(per_rank, mine)
    measured = times[plan.options.warmup:]
    return {
        "losses": losses,
        "grad_norms": norms,
        "step_times_s": times,
        "iteration_time_s": statistics.median(measured),
        "peak_memory_gib_per_rank": [x[0] for x in per_rank],
        "peak_rss_gib_per_rank": [x[1] for x in per_rank],
        "phases_per_rank": [x[2] for x in per_rank],
        "speed_probes_s_per_rank": [x[3] for x in per_rank] if probes else None,
        "ep_imbalance": imbalance,
    }


def grad_norm(mods: list[Transformer], meshes: Optional[Meshes], device: torch.device) -> float:
    """Global L2 norm of the step's (reduced) gradients, the same number in every layout: squares of
    DTensor shards (TP, FSDP) are summed over the mesh dimensions they are sharded on, expert slices over
    the EP group, pipeline stages over the PP group; replicated copies count once. A gradient-scale bug,
    which AdamW's scale invariance would hide from the losses, shows up here."""
    from torch.distributed.tensor import DTensor, Replicate
    expert_ids = {id(q) for mod in mods for e in mod.modules() if isinstance(e, GroupedExperts) for q in e.parameters()}
    sums: dict = {}  # (is expert, groups to sum over) -> squared norm; same insertion order on every rank
    for q in {id(q): q for mod in mods for q in mod.parameters()}.values():
        g = q.grad
        if g is None:
            continue
        groups: tuple = ()
        if isinstance(g, DTensor):
            if any(pl.is_partial() for pl in g.placements):
                g = g.redistribute(g.device_mesh, [Replicate() if pl.is_partial() else pl for pl in g.placements])
            # not is_shard(): FSDP2 over TP uses _StridedShard, whose is_shard() is False
            groups = tuple(g.device_mesh.get_group(i) for i, pl in enumerate(g.placements) if not pl.is_replicate())
            g = g.to_local()
        key = (id(q) in expert_ids, groups)
        sq = torch.linalg.vector_norm(g.float()).to(torch.float64) ** 2
        sums[key] = sums[key] + sq if key in sums else sq
    dense = torch.zeros((), dtype=torch.float64, device=device)
    experts = torch.zeros((), dtype=torch.float64, device=device)
    for (is_expert, groups), sq in sums.items():
        sq = sq.reshape(1)
        for group in groups:
            dist.all_reduce(sq, group=group)
        (experts if is_expert else dense).add_(sq[0])
    experts = experts.reshape(1)
    if meshes is not None and meshes.ep is not None:
        dist.all_reduce(experts, group=meshes.ep.group)
    total = (dense + experts[0]).reshape(1)
    if meshes is not None and meshes.pp is not None:
        dist.all_reduce(total, group=meshes.pp)
    return float(total.sqrt())


def _inject_fault(plan: ReplayPlan, distributed: bool) -> None:
    if plan.options.fault is None or not distributed:
        return
    kind, rank = plan.options.fault
    if dist.get_rank() != rank:
        return
    if kind == "raise":
        raise RuntimeError(f"injected fault on rank {rank}")
    if kind == "exit":
        import os
        os._exit(3)
    while kind == "hang":
        time.sleep(1.0)


def trace_path(base: str, rank: int) -> str:
    stem, dot, ext = base.rpartition(".")
    return f"{stem}.rank{rank}.{ext}" if dot and ext == "json" else f"{base}.rank{rank}.json"


def _profile_step(plan: ReplayPlan, one_step, device: torch.device, rank: int) -> None:
    """One extra (untimed, uncompared) step under torch.profiler, with Python frames (`with_stack`: what the
    schedule, hooks and our own code cost on the host between the ops); one Chrome trace per rank."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts, with_stack=True) as prof:
        one_step(plan.options.steps)
    prof.export_chrome_trace(trace_path(plan.options.torch_trace, rank))


def run_reference(plan: ReplayPlan) -> dict:
    """Per-step losses and gradient norms of the single-process reference (in this process, all cores)."""
    import os
    ref = reference_plan(plan)
    torch.set_num_threads(os.cpu_count() or 1)
    device = torch.device("cuda", 0) if plan.device == "cuda" else torch.device("cpu")
    opts = replace(ref.options, torch_trace=None)
    out = train(replace(ref, options=opts), None, device)
    return {"losses": out["losses"], "grad_norms": out["grad_norms"]}
