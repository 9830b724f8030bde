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
