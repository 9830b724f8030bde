"""PyTorch's memory timeline on CPU for a one-process replay, op by op, to set against the simulated one.

What works on CPU (torch 2.13.0, checked): `torch.cuda.memory._record_memory_history` is CUDA's caching
allocator only; `torch.profiler.profile(profile_memory=True)` records every allocation and free of the
CPU allocator as a `[memory]` instant event with the allocator's running total (`Total Allocated`) in the
Chrome trace, and `prof._memory_profile()` (private) categorises them. We use the public one: the Chrome
trace's `[memory]` events. Their `Total Allocated` counts what was allocated since the profiler started
(the parameters and module buffers made before it are not in it) and it is the process's running total
since its first profiled session (a second recording starts where the first one's leftovers were), so
the level is `parameters + module buffers + (Total Allocated - its value before the first event)`. Passes are marked with `record_function` ranges
("F mb0", "B mb0", "optimizer", "zero_grad"), which land in the same trace on the same clock.

The run: the replay's own model, data, initialisation and AdamW (`train.py` / `llama.py`), fp32 on CPU,
one process, `steps` optimizer steps of the scenario's micro-batches, each micro-batch's forward + loss
then its backward (gradient accumulation into `.grad`), `opt.step()`, `opt.zero_grad(set_to_none=True)`.
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from simulator.scenario import Scenario

from .data import global_batch, rank_batch, zigzag_positions
from .llama import token_loss
from .plan import ReplayOptions, plan_replay
from .train import _optimizer, build_parts, reference_plan


def record_memory_timeline(sc: Scenario, *, steps: int = 2, seed: int = 1234, threads: int = 1) -> dict:
    """Run `steps` training steps of `sc` in this process under the profiler; returns
    {"levels": [(t_s, bytes)], "passes": [(name, start_s, end_s)], "base_bytes", "torch"} with times in
    seconds from the first marked pass."""
    if sc.parallel.pp * sc.parallel.tp * sc.parallel.cp * sc.dp * sc.parallel.ep != 1:
        raise ValueError("the memory timeline is recorded for one process: set parallel degrees to 1")
    torch.set_num_threads(threads)
    plan = reference_plan(plan_replay(sc, ReplayOptions(device="cpu", steps=steps, warmup=0, seed=seed)))
    plan = replace(plan, dtype="fp32")
    device = torch.device("cpu")
    torch.manual_seed(seed)
    (_, model), = build_parts(plan, None, device)
    opt = _optimizer(plan, [model])
    t = sc.training
    tokens, mb = t.global_batch * t.seq_len, t.micro_batch
    positions = zigzag_positions(t.seq_len, 1, 0)
    base = sum(q.numel() * q.element_size() for q in model.parameters())
    base += sum(b.numel() * b.element_size() for b in model.buffers())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            for step in range(steps):
                inputs, labels = global_batch(seed, step, t.global_batch, t.seq_len, sc.model.vocab)
                x, y = rank_batch(inputs, labels, dp=1, dp_rank=0, positions=positions)
                for i in range(sc.micro_batches):
                    with record_function(f"F mb{i} step{step}"):
                        loss = token_loss(model(x[i * mb:(i + 1) * mb]), y[i * mb:(i + 1) * mb], tokens)
                    with record_function(f"B mb{i} step{step}"):
                        loss.backward()
                    del loss
                with record_function(f"optimizer step{step}"):
                    opt.step()
                with record_function(f"zero_grad step{step}"):
                    opt.zero_grad(set_to_none=True)
                del x, y, inputs, labels
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    marks = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                   if e.get("ph") == "X" and e.get("cat") == "user_annotation")
    mem = sorted((e["ts"], e["args"]["Total Allocated"], e["args"]["Bytes"]) for e in events
                 if e.get("name") == "[memory]" and e["args"].get("Device Type", 0) == 0)
    # the CPU allocator's total is the process's since its first profiled session: start from ours
    offset = mem[0][1] - mem[0][2]
    t0 = marks[0][0]
    return {"levels": [((ts - t0) * 1e-6, base + total - offset) for ts, total, _ in mem],
            "passes": [(name, (a - t0) * 1e-6, (b - t0) * 1e-6) for a, b, name in marks],
            "base_bytes": base, "torch": torch.__version__}
