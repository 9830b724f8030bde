"""Where a profile came from: device, software versions, host, time and command (the profile's
`provenance`), and the topology GPU whose spec sheet its achieved numbers are compared with (`spec`)."""
from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import torch

import simulator
from simulator.errors import ScenarioError
from simulator.topology import load_topology, topology_names

REPO = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def git_commit() -> str | None:
    commit = _run(["git", "rev-parse", "HEAD"], REPO)
    if commit and _run(["git", "status", "--porcelain", "--untracked-files=no"], REPO):
        commit += "-dirty"
    return commit


def driver_version() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out else None


def provenance(device: torch.device, *, device_count: int, threads: int, quick: bool, scenario: str | None,
               argv: list[str]) -> dict:
    cuda = device.type == "cuda"
    nccl = None
    if cuda:
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 (a build without NCCL)
            nccl = None
    return {
        "device_type": device.type,
        "device_name": device_name(device),
        "device_index": device.index or 0,
        "device_count": max(1, device_count),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda if cuda else None,
        "driver_version": driver_version() if cuda else None,
        "cudnn_version": str(torch.backends.cudnn.version()) if cuda and torch.backends.cudnn.is_available() else None,
        "nccl_version": nccl,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count() or 1,
        "threads": threads,
        "hostname": socket.gethostname(),
        "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "command": " ".join(shlex.quote(a) for a in ["python", "-m", "calibrate", *argv]),
        "python_version": platform.python_version(),
        "clustersim_version": simulator.__version__,
        "git_commit": git_commit(),
        "load_average_start": load_average(),
        "quick": quick,
        "scenario": scenario,
    }


def matching_spec(device: torch.device, name: str) -> dict | None:
    """The topology whose GPU this device is (by model token: H100, A100, H200, B200, ...), or cpu-host."""
    if device.type == "cpu":
        wanted = ["cpu-host"]
    else:
        tokens = set(re.findall(r"\b(G?[A-Z]{1,2}\d{2,3}[A-Z]?)\b", name.upper()))
        wanted = []
        for topo in topology_names():
            try:
                gpu = load_topology(topo).gpu.name.upper()
            except ScenarioError:
                continue
            if tokens & set(re.findall(r"\b(G?[A-Z]{1,2}\d{2,3}[A-Z]?)\b", gpu)):
                wanted.append(topo)
    for topo in wanted:
        try:
            t = load_topology(topo)
        except ScenarioError:
            continue
        return {"topology": t.name, "gpu_name": t.gpu.name, "peak_tflops": dict(t.gpu.peak_tflops),
                "hbm_bandwidth_gbs": t.gpu.hbm_bandwidth_gbs}
    return None
