"""One calibration run: the probes' checks, their measurements under a progress bar, the collective
sweep, and the profile mapping they make (validated by `simulator.cost.profile` before it is written)."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from simulator.cost.profile_load import profile_from_mapping
from simulator.cost.profile_schema import SCHEMA_VERSION

from . import collectives
from .probes import Context, Skip, Task, attention, first_line, framework, gemm, memory, optimizer
from .provenance import load_average

PROBES = {"gemm": gemm, "attention": attention, "memory": memory, "optimizer": optimizer, "framework": framework}
TABLES = ("gemm", "attention", "elementwise", "host_device", "optimizer", "framework", "collectives")


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    probes: tuple[str, ...]
    """Which of PROBES and 'collectives' to run."""
    threads: int
    progress: bool = True
    budget_s: float | None = None
    """Seconds after which no further point is measured (they are listed as skipped); None: no limit."""


def _run_task(task: Task, failed: dict[str, str], device: torch.device) -> tuple[dict | None, dict | None]:
    """(entry, None) or (None, skipped entry)."""
    if task.requires in failed:
        return None, {"table": task.table, "what": task.what, "reason": failed[task.requires]}
    try:
        return task.run(), None
    except Skip as e:
        return None, {"table": task.table, "what": task.what, "reason": str(e)}
    except Exception as e:  # noqa: BLE001 (out of memory, a kernel missing for one shape: record, go on)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return None, {"table": task.table, "what": task.what, "reason": first_line(e)}


def spent(start: float, budget_s: float | None) -> bool:
    """Whether the run's time budget (`--budget-s`) is used up."""
    return budget_s is not None and time.monotonic() - start >= budget_s


def budget_reason(budget_s: float) -> str:
    return f"time budget spent (--budget-s {budget_s:g})"


def calibrate(ctx: Context, opts: RunOptions, prov: dict, spec: dict | None, console: Console) -> dict:
    """Run everything and return the profile mapping (schema: simulator/profile.py)."""
    start = time.monotonic()
    tables: dict[str, list] = {t: [] for t in TABLES}
    checks: list[dict] = []
    skipped: list[dict] = []
    failed: dict[str, str] = {}
    probes = [name for name in PROBES if name in opts.probes]
    for name in probes:
        for res in PROBES[name].checks(ctx):
            if res.entry is not None:
                checks.append(res.entry)
                if not res.entry["ok"]:
                    failed[res.key] = (f"reference check failed: error {res.entry['max_error']:.2e} "
                                       f"> {res.entry['tolerance']:.0e}")
            else:
                failed[res.key] = res.reason or "check could not run"
    task_lists = [PROBES[name].tasks(ctx) for name in probes]
    coll_plan = ctx.plan.collectives if "collectives" in opts.probes else None
    total = sum(len(t) for t in task_lists) + (collectives.points(coll_plan) if coll_plan else 0)
    columns = (TextColumn("{task.description:<60.60}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=not opts.progress, transient=False) as bar:
        job = bar.add_task("calibrating", total=total)
        for i, tasks in enumerate(task_lists):
            for task in tasks:
                bar.update(job, description=task.what)
                if spent(start, opts.budget_s):
                    skipped.append({"table": task.table, "what": task.what, "reason": budget_reason(opts.budget_s)})
                    bar.advance(job)
                    continue
                entry, skip = _run_task(task, failed, ctx.device)
                if isinstance(entry, list):  # a probe that measures several points at once
                    tables[task.table] += entry
                elif entry is not None:
                    tables[task.table].append(entry)
                else:
                    skipped.append(skip)
                bar.advance(job)
            task_lists[i] = []  # free the probe's input pools before the next probe
        if coll_plan is not None and spent(start, opts.budget_s):
            skipped.append({"table": "collectives", "what": "all", "reason": budget_reason(opts.budget_s)})
        elif coll_plan is not None:
            bar.update(job, description=f"collectives ({coll_plan.backend}, starting {coll_plan.max_world} processes)")

            def on_progress(what: str) -> None:
                bar.update(job, description=f"collective {what}")
                bar.advance(job)
            entries, coll_checks, coll_skipped = collectives.run(coll_plan, opts.threads, on_progress)
            tables["collectives"] += entries
            checks += coll_checks
            skipped += coll_skipped
        elif "collectives" in opts.probes:
            skipped.append({"table": "collectives", "what": "all",
                            "reason": "one device visible: collectives need at least two"})
    prov = {**prov, "load_average_end": load_average(), "wall_s": round(time.monotonic() - start, 3)}
    return {"schema_version": SCHEMA_VERSION, "provenance": prov, "spec": spec, **tables, "checks": checks,
            "skipped": skipped}


SIGNIFICANT_DIGITS = 6
"""Floats are written with this many significant digits (timer resolution is far coarser)."""


def _rounded(value):
    if isinstance(value, float):  # NaN / Inf become null: strict JSON, and the schema says which may be null
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def profile_text(profile: dict) -> str:
    """JSON with one table entry per line (readable, and diffs stay small), floats rounded to
    SIGNIFICANT_DIGITS; validated before it is returned."""
    profile = _rounded(profile)
    profile_from_mapping(profile, "calibrate output")
    lines = ["{"]
    keys = list(profile)
    for j, key in enumerate(keys):
        comma = "," if j < len(keys) - 1 else ""
        value = profile[key]
        if isinstance(value, list) and value:
            lines.append(f"  {json.dumps(key)}: [")
            lines += [f"    {json.dumps(v)}{',' if i < len(value) - 1 else ''}" for i, v in enumerate(value)]
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"
