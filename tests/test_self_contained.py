"""The repository stands alone: a copy of its tracked files, away from any sibling directory, runs the
playbook validation, no Python file builds a path into `../shared`, and the shipped data is the file its
provenance names."""
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tracked_files() -> list[str]:
    """What a fresh clone holds: git's tracked files (plus any not yet committed, so the test checks the
    working tree); without git, every file but caches."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        return [f for f in out.splitlines() if (ROOT / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                if p.is_file() and ".git" not in p.parts and "__pycache__" not in p.parts]


def test_playbook_validation_runs_from_a_copy_of_the_repository(tmp_path):
    clone = tmp_path / "deep" / "clone"  # nothing named shared/ beside it
    for f in tracked_files():
        (clone / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, clone / f)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CLUSTERSIM_PLAYBOOK_CSV")}
    r = subprocess.run([sys.executable, "-m", "simulator", "validate", "--set", "playbook", "--sample", "50"],
                       cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "| playbook |" in r.stdout and "fit" in r.stdout and "validation" in r.stdout
    assert str(ROOT) not in r.stdout + r.stderr


def test_no_python_file_reads_the_shared_directory():
    pattern = re.compile(r"""(["'/]\.\./shared|parent\s*/\s*["']shared["'])""")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in ROOT.rglob("*.py") if ".git" not in p.parts
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []


def test_shipped_playbook_csv_is_the_one_its_provenance_names():
    data = ROOT / "validation" / "data" / "playbook"
    named = re.findall(r"sha256 of the CSV:\s*`([0-9a-f]{64})`", (data / "README.md").read_text())
    assert named and hashlib.sha256((data / "nanotron_ultrascale_runs.csv").read_bytes()).hexdigest() == named[0]
