"""Starting the world: one process per rank with `torch.multiprocessing.start_processes` (spawn), or
the current process when `torchrun` started us (its RANK/WORLD_SIZE/MASTER_* variables are set).

Nothing may hang: process groups get a timeout, and the parent is a watchdog: `ProcessContext.join`
notices a rank that raised or died and terminates the others, and a deadline on the whole run
terminates everything. A failure becomes a `ReplayFailed` with one readable line (the failing rank's
traceback goes to stderr).
"""
from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Optional

from .plan import ReplayPlan

MASTER_ADDR = "127.0.0.1"
JOIN_POLL_S = 0.5


class ReplayFailed(RuntimeError):
    """A rank failed or the run timed out (exit code 1)."""


def under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((MASTER_ADDR, 0))
        return s.getsockname()[1]


def _pg_timeout(plan: ReplayPlan) -> timedelta:
    return timedelta(seconds=max(30.0, min(plan.options.timeout_s, 600.0)))


def run_rank(rank: int, plans: list[ReplayPlan], local_rank: int) -> list[dict]:
    """Body of one rank: one process group, then each plan in turn (its own meshes and model)."""
    import torch
    import torch.distributed as dist

    from .meshes import build_meshes
    from .train import train

    first = plans[0]
    torch.set_num_threads(first.threads)
    # The LM head's all-gathered logits are a view; we never modify them in place, so FSDP2's warning
    # about in-place ops on views does not apply.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    if first.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(first.backend, rank=rank, world_size=first.world, timeout=_pg_timeout(first))
    try:
        return [train(plan, build_meshes(plan.scenario, plan.device), device) for plan in plans]
    finally:
        dist.destroy_process_group()


def _spawned(local_rank: int, plans: list[ReplayPlan], port: int, outdir: str) -> None:
    sys.stdout = sys.stderr  # stdout belongs to the parent's report
    os.environ.update(MASTER_ADDR=MASTER_ADDR, MASTER_PORT=str(port), RANK=str(local_rank),
                      WORLD_SIZE=str(plans[0].world), LOCAL_RANK=str(local_rank))
    results = run_rank(local_rank, plans, local_rank)
    if local_rank == 0:
        Path(outdir, "result.json").write_text(json.dumps(results))


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no message"


def launch(plan: ReplayPlan) -> Optional[dict]:
    """Run the plan on `plan.world` ranks; rank 0's summary (None on the other torchrun ranks)."""
    results = launch_many([plan])
    return results[0] if results is not None else None


def launch_many(plans: list[ReplayPlan]) -> Optional[list[dict]]:
    """Run several plans of the same world size and device one after the other in one set of processes
    (one start-up, one process group: how the tests keep their cost down)."""
    first = plans[0]
    if any((p.world, p.device, p.backend) != (first.world, first.device, first.backend) for p in plans):
        raise ValueError("launch_many: plans must share world size, device and backend")
    if under_torchrun():
        rank = int(os.environ["RANK"])
        results = run_rank(rank, plans, int(os.environ.get("LOCAL_RANK", rank)))
        return results if rank == 0 else None
    import torch.multiprocessing as mp

    timeout = sum(p.options.timeout_s for p in plans)
    with tempfile.TemporaryDirectory(prefix="replay-") as outdir:
        ctx = mp.start_processes(_spawned, args=(plans, free_port(), outdir), nprocs=first.world, join=False,
                                 start_method="spawn")
        deadline = time.monotonic() + timeout
        try:
            while not ctx.join(timeout=JOIN_POLL_S):
                if time.monotonic() > deadline:
                    _terminate(ctx)
                    raise ReplayFailed(f"replay timed out after {timeout:.0f} s (--timeout); "
                                       f"all {first.world} ranks were stopped")
        except mp.ProcessRaisedException as e:
            print(f"--- rank {e.error_index} traceback ---\n{e}", file=sys.stderr)
            raise ReplayFailed(f"rank {e.error_index} failed: {_last_line(str(e))}") from None
        except mp.ProcessExitedException as e:
            how = f"signal {e.signal_name}" if e.signal_name else f"exit code {e.exit_code}"
            raise ReplayFailed(f"rank {e.error_index} died ({how}); the other ranks were stopped") from None
        except BaseException:  # Ctrl-C, or SIGTERM turned into KeyboardInterrupt (replay/cli.py): no rank outlives us
            _terminate(ctx)
            raise
        path = Path(outdir, "result.json")
        if not path.exists():
            raise ReplayFailed("rank 0 finished without writing its result")
        return json.loads(path.read_text())


def _terminate(ctx) -> None:
    for p in ctx.processes:
        if p.is_alive():
            p.terminate()
    for p in ctx.processes:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
