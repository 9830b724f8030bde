"""`sweep --ray` on a real Ray cluster (one node, this machine, loopback only) ranks as the local pool does.

The cluster is started with `ray start --head --block` in its own process group and a temp folder of
its own, so the test never touches another Ray cluster on the machine and stops exactly what it
started. Ray comes from the `ray` extra (CI installs `.[all]`); without it, the pinned version is
installed into a cached virtual environment (`registry.venv_with`).
"""
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from registry import ROOT, run_python, venv_with

RAY = "ray==2.60.0"
"""The version pyproject's `ray` extra pins (a cp311 manylinux wheel of 79 MB)."""
SCENARIO = "scenarios/8b_8gpu.yaml"

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_env() -> dict:
    env = dict(os.environ)
    # On Linux Ray advertises the host's first routable address even when told 127.0.0.1
    # (ray._private.services.resolve_ip_for_localhost); with "clusters" off it keeps the node on
    # loopback. The variable's name speaks of Windows and macOS, its effect is the same on Linux.
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


def _sweep_rows(python, args: list[str], env: dict) -> list[dict]:
    proc = run_python(python, ["-m", "simulator", "sweep", SCENARIO, "--json", "--top", "0", *args], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)
    for row in rows:  # the only field that depends on where a row ran: the engine's own wall time
        row["report"].get("sim", {}).pop("wall_s", None)
    return rows


@pytest.fixture(scope="module")
def ray_cluster():
    python = sys.executable if importlib.util.find_spec("ray") else venv_with(RAY)
    env = _ray_env()
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must stay < 108 bytes
    cmd = [str(python), "-m", "ray.scripts.scripts", "start", "--head", "--block", "--port", str(port),
           "--node-ip-address", "127.0.0.1", "--num-cpus", "2", "--include-dashboard", "false",
           "--dashboard-agent-listen-port", str(_free_port()), "--disable-usage-stats", "--temp-dir", temp_dir]
    head = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        probe = "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); ray.shutdown()"
        while run_python(python, ["-c", probe, address], env=env, timeout_s=120).returncode != 0:
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the local Ray head did not come up:\n" + (head.stdout.read() if head.poll() is not None else ""))
            time.sleep(2)
        yield python, address, env
    finally:
        # --block: the head's processes are its children, in the session we started; stop that session only
        try:
            os.killpg(head.pid, signal.SIGTERM)
            head.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_ray_cluster_ranks_as_the_local_pool(ray_cluster):
    python, address, env = ray_cluster
    on_ray = _sweep_rows(python, ["--ray", address], env)
    local = _sweep_rows(python, ["--jobs", "2"], env)
    assert len(on_ray) > 10
    assert [(r["parallel"], r["training"]) for r in on_ray] == [(r["parallel"], r["training"]) for r in local]
    assert on_ray == local


def test_ray_nodes_stay_on_loopback(ray_cluster):
    python, address, env = ray_cluster
    code = ("import ray, sys, json; ray.init(address=sys.argv[1], log_to_driver=False); "
            "print(json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes()))); ray.shutdown()")
    proc = run_python(python, ["-c", code, address], env=env, timeout_s=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["127.0.0.1"]
