"""Long commands show progress on a terminal only and always end with their wall time on stderr
(simulator/progress.py), leaving stdout to the output (one JSON document with --json)."""
import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from simulator.progress import PhaseLines, PhaseProgress, format_wall_time, wall_time_line

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ["sweep", "scenarios/8b_8gpu.yaml", "--top", "2", "--engine-top", "1", "--jobs", "1",
         "--fix", "training.micro_batch=1", "--fix", "parallel.cp=1"]


def _run(args, stderr=subprocess.PIPE):
    return subprocess.run([sys.executable, "-m", "simulator", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr,
                          text=True, timeout=300)


@pytest.mark.parametrize("seconds,text", [(0.5, "0.50 s"), (12.34, "12.3 s"), (225, "3 min 45 s"), (3725, "1 h 02 min")])
def test_wall_time_is_written_for_people(seconds, text):
    assert format_wall_time(seconds) == text
    assert wall_time_line("sweep", seconds) == f"sweep: wall time {text}"


def test_progress_is_silent_when_not_asked(capsys):
    with PhaseProgress(enabled=False) as bar:
        bar("phase", 1, 2)
    PhaseLines("replay", enabled=False)("a phase")
    assert capsys.readouterr().err == ""


def test_sweep_json_on_a_pipe_has_json_out_and_only_the_wall_time_on_stderr():
    r = _run([*SWEEP, "--json"])
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)) == 2
    assert r.stderr.splitlines() == [r.stderr.strip()] and r.stderr.startswith("sweep: wall time ")


def _read_all(fd, into: list) -> None:
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the writing end is closed
            return
        if not chunk:
            return
        into.append(chunk)


def test_sweep_on_a_terminal_shows_its_phases_on_stderr():
    master, slave = pty.openpty()
    got: list = []
    reader = threading.Thread(target=_read_all, args=(master, got))  # drained while it runs: a full pty blocks the child
    reader.start()
    try:
        r = _run([*SWEEP, "--json"], stderr=slave)
    finally:
        os.close(slave)
        reader.join(timeout=30)
        os.close(master)
    assert r.returncode == 0
    assert len(json.loads(r.stdout)) == 2  # stdout still one JSON document
    text = b"".join(got).decode(errors="replace")
    assert "phase 1" in text and "engine" in text and "sweep: wall time " in text


def test_validate_ends_with_its_wall_time_and_prints_no_progress_on_a_pipe():
    r = _run(["validate", "--set", "published", "--sample", "2", "--json"])
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and r.stderr.startswith("validate: wall time ")
