"""Where sweep tasks run: in this process, a local process pool, or a Ray cluster. Each task is plain
data in, plain data out, so the result does not depend on where it ran."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional


from ..errors import ScenarioError

# ----------------------------------------------------------------------------------- where tasks run

class SerialRunner:
    """Runs tasks one after another in this process (the reference for the others)."""

    def map(self, fn: Callable, tasks: list[tuple], on_done: Callable[[int], None] = lambda n: None) -> list:
        out = []
        for t in tasks:
            out.append(fn(*t))
            on_done(1)
        return out

    def close(self) -> None:
        pass


class PoolRunner:
    """A local process pool (`concurrent.futures`); results come back in task order."""

    def __init__(self, jobs: int):
        from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415
        self.pool = ProcessPoolExecutor(max_workers=jobs)

    def map(self, fn: Callable, tasks: list[tuple], on_done: Callable[[int], None] = lambda n: None) -> list:
        from concurrent.futures import as_completed  # noqa: PLC0415
        futures = {self.pool.submit(fn, *t): i for i, t in enumerate(tasks)}
        out: list = [None] * len(tasks)
        for f in as_completed(futures):
            out[futures[f]] = f.result()
            on_done(1)
        return out

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)


class RayRunner:
    """The same tasks as remote functions on a Ray cluster (optional dependency, imported here only).
    The simulator package travels with the job (`runtime_env.py_modules`), so workers need no install."""

    def __init__(self, address: str):
        try:
            import ray  # noqa: PLC0415
        except ImportError:
            raise ScenarioError("--ray", "the optional dependency ray is not installed",
                                "pip install ray (the version in pyproject's ray extra), or run without --ray (local process pool)") from None
        self.ray = ray
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                 runtime_env={"py_modules": [str(Path(__file__).resolve().parents[1])]})

    def map(self, fn: Callable, tasks: list[tuple], on_done: Callable[[int], None] = lambda n: None) -> list:
        remote = self.ray.remote(fn)
        refs = [remote.remote(*t) for t in tasks]
        pending = list(refs)
        while pending:
            done, pending = self.ray.wait(pending, num_returns=1)
            on_done(len(done))
        return self.ray.get(refs)

    def close(self) -> None:
        """Disconnect this driver; the cluster keeps running (it is not ours to stop)."""
        self.ray.shutdown()


def make_runner(jobs: int, ray_address: Optional[str] = None):
    if ray_address:
        return RayRunner(ray_address)
    return PoolRunner(jobs) if jobs > 1 else SerialRunner()
