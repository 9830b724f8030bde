"""Install a pinned package from the package registry for a slow test, outside the project's environment.

The frameworks the exports target (torchtitan, nanotron, megatron-core) and Ray are not dependencies of
clustersim: a test that checks an export with the framework's own parser installs the framework with
`pip install --target` into a folder under the system temp directory, keyed by the exact requirement,
and reuses it on the next run (pip's own download cache makes a fresh folder quick too). The test then
runs Python in a subprocess with that folder first on PYTHONPATH, so nothing leaks into the test process.

A test is skipped only when the registry cannot be reached; any other install failure fails it.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UNREACHABLE = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable",
               "ConnectTimeoutError", "Max retries exceeded", "Could not fetch URL", "ProxyError")
"""pip's words when the registry does not answer (then skipping is honest; anything else is a failure)."""


def pip_target(*requirements: str, no_deps: tuple[str, ...] = (), timeout_s: float = 600) -> Path:
    """A folder holding `requirements` (with their dependencies) and `no_deps` (without theirs).

    `pip install --target` does not count what this environment already has, so a framework whose
    dependencies include torch goes in `no_deps` (torch is already here, pinned) and the few light
    dependencies its config code imports go in `requirements`."""
    key = hashlib.sha256(repr((sys.version_info[:2], requirements, no_deps)).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / "clustersim-test-packages" / key
    done = folder / ".installed"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for reqs, extra in ((requirements, []), (no_deps, ["--no-deps"])):
        if not reqs:
            continue
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target",
               str(folder), "--upgrade", *extra, *reqs]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            out = proc.stdout + proc.stderr
            if any(word in out for word in UNREACHABLE):
                pytest.skip(f"the package registry is unreachable, cannot install {' '.join(reqs)}")
            pytest.fail(f"pip install {' '.join(reqs)} failed:\n{out[-3000:]}")
    done.write_text("\n".join(requirements + no_deps) + "\n")
    return folder


def run_with(folder: Path | None, code_or_args: list[str], env: dict | None = None, timeout_s: float = 300,
             **kw) -> subprocess.CompletedProcess:
    """Run `python ARGS` from the repository root with `folder` first on PYTHONPATH."""
    e = dict(os.environ if env is None else env)
    if folder is not None:
        e["PYTHONPATH"] = os.pathsep.join([str(folder), str(ROOT)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    return subprocess.run([sys.executable, *code_or_args], cwd=ROOT, env=e, capture_output=True, text=True,
                          timeout=timeout_s, **kw)
