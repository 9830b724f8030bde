"""Install pinned packages from the package registry for a slow test, outside the project's environment.

The frameworks the exports target (torchtitan, nanotron) and Ray are not dependencies of clustersim
(Ray is optional): a test that checks an export with the framework's own parser, or runs a real Ray
cluster, installs them into a virtual environment under the system temp folder, keyed by the exact
requirements and reused by the next run. The environment sees this one's packages
(`--system-site-packages`), so torch, pinned by constraints.txt, is not installed again, and the test
runs the framework in a subprocess with that environment's Python: nothing leaks into the test process.

A test is skipped only when the registry cannot be reached; any other install failure fails it.
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UNREACHABLE = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable",
               "ConnectTimeoutError", "Max retries exceeded", "Could not fetch URL", "ProxyError")
"""pip's words when the registry does not answer (then skipping is honest; anything else is a failure)."""


def venv_with(*requirements: str, timeout_s: float = 900) -> Path:
    """The Python executable of a virtual environment holding `requirements` (and this environment's
    packages); created once per requirement set and Python version."""
    key = hashlib.sha256(repr((sys.version_info[:2], sys.prefix, requirements)).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / "clustersim-test-venvs" / key
    python = folder / "bin" / "python"
    done = folder / ".installed"
    if done.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--clear", str(folder)], check=True,
                   capture_output=True, timeout=300)
    cmd = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "-c", str(ROOT / "constraints.txt"), *requirements]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        out = proc.stdout + proc.stderr
        if any(word in out for word in UNREACHABLE):
            pytest.skip(f"the package registry is unreachable, cannot install {' '.join(requirements)}")
        pytest.fail(f"pip install {' '.join(requirements)} failed:\n{out[-3000:]}")
    done.write_text("\n".join(requirements) + "\n")
    return python


def run_python(python: Path | str, args: list[str], env: dict | None = None, timeout_s: float = 300,
               **kw) -> subprocess.CompletedProcess:
    """`python ARGS` from the repository root (so `import simulator` finds this checkout)."""
    return subprocess.run([str(python), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout_s, **kw)
