"""The reference-comparison scripts exit non-zero on a miss: run them as CI does."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("script", ["validation/memory_reference.py"])
def test_validation_script_passes(script):
    r = subprocess.run([sys.executable, str(ROOT / script)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_analytic_vs_engine_prices_sampled_layouts_both_ways():
    r = subprocess.run([sys.executable, str(ROOT / "validation/analytic_vs_engine.py"), str(ROOT / "scenarios/8b_8gpu.yaml"),
                        "--per-scenario", "3", "--jobs", "1", "--worst", "3"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.startswith("3 layouts (seed 1): engine / analytic step time off by a median")
    assert r.stdout.count("x  8b_8gpu.yaml") == 3
