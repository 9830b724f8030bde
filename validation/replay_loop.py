"""The calibrate -> simulate -> replay -> compare loop over the replay scenarios (issue 6).

    python validation/replay_loop.py [--profile FILE] [--steps N] [--warmup N] [--rounds R] [--json FILE] [SCENARIO ...]

1. Calibration, right before each replay: `python -m calibrate --device cpu --scenario SCENARIO` measures
   exactly the kernels and collectives that scenario's ops need (about a minute) into a temporary profile.
   This host's speed drifts (a shared VM: the same GEMM measured 0.47 ms at one calibration and 0.63 ms
   three hours later, and its speed switches between two states ~1.45x apart within seconds), so a profile
   from another hour prices another machine.
   `--profile FILE` skips this and prices every plan from FILE (e.g. `calibrate/profiles/cpu-host.json`).
2. For each scenario (default `scenarios/replay/*.yaml`): `python -m calibrate replay SCENARIO --json` with
   `cluster.profile` set to that profile: it runs the plan for real, checks losses and gradient norms
   against a single-process run, and asks the simulator for its prediction.
3. A table: plan, loss match, predicted and measured step time, error, and whether it is inside the bar
   (15 %, issue 6). Timings on a shared machine are noisy: each row also shows the load average, the
   busiest rank's CPU seconds per step (well below the measured time = ranks were starved of cores), the
   host's speed on the profile's own GEMMs right before and after the replay (`host x`, > 1 = slower than
   when the profile was measured; calibrate/replay/host_speed.py) and the error the prediction would
   have at that speed (`err@host`: informational).
   Each rank also times a small GEMM right before and after every step; `steady s` is the median of the
   steps in which every rank ran at the host's fast speed (all probes within 10 % of the run's fastest,
   calibrate/replay/host_speed.py) and `err steady` the prediction's error against it. The verdict
   (`<=15%`) uses `err steady` when at least two steps were steady, and the plain error otherwise; the
   `by` column says which.

A replay whose rank a signal killed (gloo aborts one now and then) is run once more; the table says so.

`--rounds R` (default 1) runs the whole loop R times, interleaved (round 1 calibrates and replays every plan,
then round 2, ...), so each plan meets the host in R of its states; after the per-round tables a summary
gives each plan's verdict errors, their median and spread, and judges the bar on the median.

Exit code: 0 when every plan ran and matched its reference (with --strict: and met the time bar), 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
TIME_BAR = 0.15
"""Predicted step time within 15 % of measured (issue 6)."""


def calibrate_for(scenario: Path, workdir: Path, device: str = "cpu") -> Path:
    """A fresh profile of this machine's `device` (cpu, or cuda: GPU 0) with exactly the shapes `scenario`
    needs (`calibrate --scenario`)."""
    out = workdir / f"{scenario.stem}.profile.json"
    where = ["--gpu", "0"] if device == "cuda" else ["--device", "cpu"]
    cmd = [sys.executable, "-m", "calibrate", *where, "--scenario", str(scenario), "--no-progress",
           "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"calibration for {scenario.name} failed (exit {proc.returncode})")
    return out


def replay(scenario: Path, profile: Path, steps: int, warmup: int, timeout: float, overrides: tuple = (),
           torch_trace: Path | None = None) -> dict:
    """`calibrate replay SCENARIO --json` priced from `profile`, with `overrides` (KEY=VALUE) set; `torch_trace`: a
    torch.profiler trace of one more step (rank r's at FILE.rank<r>.json)."""
    sets = [a for kv in (f"cluster.profile={profile}", *overrides) for a in ("--set", kv)]
    cmd = [sys.executable, "-m", "calibrate", "replay", str(scenario), "--json", "--steps", str(steps),
           "--warmup", str(warmup), *sets, *(["--torch-trace", str(torch_trace)] if torch_trace else [])]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if not proc.stdout.strip():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"scenario": scenario.name, "error": f"exit {proc.returncode}: {last}", "wall_s": wall}
    report = json.loads(proc.stdout)
    report.update(scenario=scenario.name, exit_code=proc.returncode, wall_s=wall)
    return report


KILLED = "died (signal"
"""How `calibrate replay` reports a rank that a signal ended (launch.py)."""


def replay_once_more_if_killed(run) -> dict:
    """run() once more when a rank was killed by a signal: on this host gloo now and then aborts a rank
    ("terminate called without an active exception": one of three zero3 replays in one session, one
    tp2-sp replay of a loop run in another), which says nothing about the plan or the prediction. The row
    keeps the first attempt's error (`retried_after`); a second failure is reported as it is."""
    row = run()
    if KILLED in row.get("error", ""):
        print(f"  {row['error']}; replaying once more", file=sys.stderr, flush=True)
        first = row["error"]
        row = run()
        row["retried_after"] = first
    return row


def _plan_label(p: dict) -> str:
    parts = [f"{k}{p[k]}" for k in ("dp", "tp", "pp", "cp", "ep") if p[k] > 1]
    if p["tp"] > 1 and p["sp"]:
        parts.append("sp")
    if p["pp_schedule"]:
        parts.append(p["pp_schedule"])
    if p["zero"]:
        parts.append(f"zero{p['zero']}")
    return " ".join(parts) or "single"


def _cpu(r: dict) -> str:
    """CPU seconds per step of the busiest rank: near `measured` when each rank had its core; far below
    it when ranks waited for cores other processes held (then `measured` overstates the plan's time)."""
    ph = r.get("phases_per_rank") or []
    return f"{max(x['cpu_s'] for x in ph):.3f}" if ph else "-"


def _host(r: dict) -> str:
    """The host's speed on the profile's GEMMs before/after the replay (> 1: slower than at calibration)."""
    h = r.get("host_speed_vs_profile")
    return f"{h['before']:.2f}/{h['after']:.2f}" if h else "-"


def verdict_error(r: dict) -> tuple[Optional[float], str]:
    """(error the bar is judged on, "steady" | "all"): the steady-host error when the replay had enough
    steady steps, else the plain one."""
    st = r.get("steady_host") or {}
    if st.get("relative_error") is not None:
        return st["relative_error"], "steady"
    return (r.get("relative_error") or {}).get("iteration_time_s"), "all"


def within_bar(err: Optional[float]) -> Optional[bool]:
    """|err| <= TIME_BAR; None when there is no error to judge."""
    return None if err is None else abs(err) <= TIME_BAR


def meets_bar(r: dict) -> Optional[bool]:
    """Whether one replay's verdict error is within the bar (`within_bar`)."""
    return within_bar(verdict_error(r)[0])


def _yes(b: Optional[bool]) -> str:
    return "-" if b is None else ("yes" if b else "NO")


def _steady(r: dict) -> str:
    st = r.get("steady_host")
    if not st:
        return "-"
    t = "-" if st["iteration_time_s"] is None else f"{st['iteration_time_s']:.3f}"
    return f"{t} ({len(st['steps'])}/{st['of_steps']})"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def table(rows: list[dict]) -> str:
    head = (f"{'scenario':<16} {'plan':<16} {'loss':>5} {'gnorm':>5} {'predicted s':>11} {'measured s':>10} {'error':>7} "
            f"{'rank cpu s':>10} {'load':>5} {'host x':>11} {'err@host':>8} {'steady s (n)':>13} {'err steady':>10} "
            f"{'<=15%':>5} {'by':>6}")
    out = [head, "-" * len(head)]
    for r in rows:
        if "error" in r and "measured" not in r:
            out.append(f"{r['scenario']:<16} failed: {r['error']}")
            continue
        pred, meas = r["predicted"]["iteration_time_s"], r["measured"]["iteration_time_s"]
        err = r["relative_error"]["iteration_time_s"]
        by = verdict_error(r)[1]
        out.append(f"{r['scenario']:<16} {_plan_label(r['plan']):<16} {_yes(r['loss_matches_reference']):>5} "
                   f"{_yes(r['grad_norm_matches_reference']):>5} {'-' if pred is None else f'{pred:.3f}':>11} {meas:>10.3f} "
                   f"{_pct(err):>7} {_cpu(r):>10} {r['load_average'][0]:>5.1f} {_host(r):>11} "
                   f"{_pct(r.get('iteration_time_error_at_host_speed')):>8} {_steady(r):>13} "
                   f"{_pct((r.get('steady_host') or {}).get('relative_error')):>10} "
                   f"{_yes(meets_bar(r)):>5} {by:>6}")
    out += [f"{r['scenario']}: replayed once more after: {r['retried_after']}" for r in rows if "retried_after" in r]
    return "\n".join(out)


def round_summary(rows: list[dict]) -> list[dict]:
    """Per scenario (first-seen order), over the rounds: the verdict errors (None for a round that failed),
    their median and spread (max - min), and whether the median meets the bar."""
    by: dict[str, list] = {}
    for r in rows:
        by.setdefault(r["scenario"], []).append(None if "measured" not in r else verdict_error(r)[0])
    out = []
    for name, errs in by.items():
        ok = sorted(e for e in errs if e is not None)
        med = statistics.median(ok) if ok else None
        out.append({"scenario": name, "errors": errs, "median": med, "spread": (ok[-1] - ok[0]) if ok else None,
                    "failed": len(errs) - len(ok), "median_meets_bar": within_bar(med)})
    return out


def summary_table(summary: list[dict]) -> str:
    cells = [" ".join(f"{_pct(e):>6}" for e in s["errors"]) for s in summary]
    wide = max([len("errors by round")] + [len(c) for c in cells])
    head = f"{'scenario':<16} {'errors by round':<{wide}} {'median':>7} {'spread':>7} {'failed':>6} {'median <=15%':>12}"
    out = [head, "-" * len(head)]
    for s, errs in zip(summary, cells):
        spread = "-" if s["spread"] is None else f"{100 * s['spread']:.0f} pts"
        out.append(f"{s['scenario']:<16} {errs:<{wide}} {_pct(s['median']):>7} {spread:>7} {s['failed']:>6} "
                   f"{_yes(s['median_meets_bar']):>12}")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*", help="default: scenarios/replay/*.yaml")
    ap.add_argument("--profile", help="price every plan from this profile instead of calibrating before each replay")
    ap.add_argument("--steps", type=int, default=12, help="steps per replay (more steps: more chances of steady ones)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per replay")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when a predicted time misses the 15 %% bar (with --rounds: the median over rounds)")
    ap.add_argument("--rounds", type=int, default=1, help="run the whole loop this many times, interleaved")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds: {args.rounds} is not allowed; give 1 or more")
    scenarios = [Path(s).resolve() for s in args.scenarios] or sorted((ROOT / "scenarios" / "replay").glob("*.yaml"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="replay-loop-") as tmp:
        given = Path(args.profile).resolve() if args.profile else None
        print(f"profile: {given or 'calibrated per scenario'}; {len(scenarios)} scenarios, {args.steps} steps "
              f"({args.warmup} warm-up), {args.rounds} round(s); {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
        for rnd in range(1, args.rounds + 1):
            this = []
            for sc in scenarios:
                if given is None:
                    print(f"round {rnd}: calibrating for {sc.name} ...", file=sys.stderr, flush=True)
                profile = given or calibrate_for(sc, Path(tmp))
                print(f"round {rnd}: replaying {sc.name} ...", file=sys.stderr, flush=True)
                row = replay_once_more_if_killed(lambda: replay(sc, profile, args.steps, args.warmup, args.timeout))
                this.append(dict(row, round=rnd))
            if args.rounds > 1:
                print(f"round {rnd} of {args.rounds}")
            print(table(this), flush=True)
            rows += this
    summary = round_summary(rows)
    if args.rounds > 1:
        print(f"\nOver {args.rounds} rounds (the bar judged on each plan's median error):")
        print(summary_table(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary} if args.rounds > 1 else rows, indent=1))
    ok = all(r.get("loss_matches_reference") and r.get("grad_norm_matches_reference") for r in rows)
    if args.strict:
        ok = ok and all(s["median_meets_bar"] for s in summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
