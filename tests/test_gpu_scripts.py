"""The GPU measurement scripts under validation/ (host copies for activation offloading, the host's cost of issuing
GPU work) refuse plainly on a machine without CUDA, as this project's CI is, and keep their results' format."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))


@pytest.mark.parametrize("module", ["host_copy_gpu", "host_overhead_gpu"])
def test_without_a_gpu_the_script_exits_2_and_says_why(module, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    mod = __import__(module)
    assert mod.main([]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_the_committed_measurements_name_their_device_and_date():
    copy = json.loads((ROOT / "validation" / "results" / "host_copy_gpu.json").read_text())
    assert copy["device"] == "NVIDIA H200" and copy["date"] == "2026-11-26"
    assert all(40 < r["d2h"] < 64 and 40 < r["h2d"] < 64 for r in copy["rows"] if r["mb"] >= 256)  # PCIe Gen5 x16
    over = json.loads((ROOT / "validation" / "results" / "host_overhead_gpu.json").read_text())
    assert over["device"] == "NVIDIA H200" and 1 < over["eager_op_us"] < over["linear_fwd_us"] < over["d2h_sync_us"]


def test_profile_vs_trace_builds_traces_and_drops_one_op_at_a_time():
    """Each op's runner (with its retained graphs) is built only after the previous one is dropped: all of a 1B
    step's runners at once outgrew an 80 GB H100 (2026-11-27)."""
    import weakref

    torch = pytest.importorskip("torch")
    import profile_vs_trace

    alive: list = []

    class Op:
        def __call__(self, i: int):
            return torch.ones(256).sum()

    def make():
        assert all(ref() is None for ref in alive), "the previous op's runner is still alive"
        op = Op()
        alive.append(weakref.ref(op))
        return op

    out = profile_vs_trace.traced_seconds([(make, 5), (make, 7), (make, 5)], torch.device("cpu"))
    assert len(out) == 3 and all(t > 0 for t in out) and len(alive) == 3
