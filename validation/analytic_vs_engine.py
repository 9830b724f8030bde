"""Does the analytic estimate agree with the engine? Both on random layouts of the shipped scenarios.

    python validation/analytic_vs_engine.py [--per-scenario N] [--seed S] [--jobs J] [SCENARIO ...]

`sweep` ranks every layout with the analytic estimate and re-simulates only the best few with the
engine, so a layout the analytic prices wrong is never looked at again. This samples `N` layouts from
each scenario's sweep space (`sweep.enumerate_layouts`, seeded; half of them with `overlap_dp: false`),
prices each with both estimators (memory fit is not checked: both price the step as if it fitted) and
prints the spread of engine / analytic step time and the layouts that disagree most, with the
breakdown entries that differ by more than 2 % of the step.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.sweep.search import sweep_base
from simulator.sweep.runners import make_runner
from simulator.sweep.tasks import candidate_scenario
from simulator.sweep.space import enumerate_layouts  # noqa: E402

SCENARIOS = ("scenarios/70b_512gpu.yaml", "scenarios/mixtral_ep.yaml", "scenarios/8b_8gpu.yaml")
NO_OVERLAP = ("parallel.overlap_dp=false",)
NO_OVERLAP_MEGATRON = ("framework.overlap_grad_reduce=false", "framework.overlap_param_gather=false", *NO_OVERLAP)
"""Without DP overlap: where the scenario gives Megatron's switches, those too (the option and the key it sets must
agree, `frameworks/resolve.py`), else the scenario key alone."""


def no_overlap(raw: dict) -> tuple[str, ...]:
    """The overrides that turn DP overlap off for a scenario read as `raw` (`sweep_base`)."""
    fw = raw.get("framework")
    return NO_OVERLAP_MEGATRON if isinstance(fw, dict) and "overlap_grad_reduce" in fw else NO_OVERLAP


def both(path: str, raw: dict, base: str, layout, overrides: tuple[str, ...]) -> dict:
    """Step time and breakdown from each estimator (a task for the process pool); `raw`, `base`: the
    scenario as `sweep_base` read it with `overrides`."""
    from simulator.run import simulate  # noqa: PLC0415
    sc = candidate_scenario(raw, base, layout)
    a, e = simulate(sc, estimator="analytic"), simulate(sc, estimator="engine")
    return {"scenario": Path(path).name, "layout": layout.label(), "overrides": " ".join(overrides),
            "analytic_s": a["iteration_time_s"], "engine_s": e["iteration_time_s"],
            "differs": {k: e["breakdown"][k] - v for k, v in a["breakdown"].items()
                        if abs(e["breakdown"][k] - v) > 0.02 * e["iteration_time_s"]}}


def sample(paths, per_scenario: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    tasks = []
    for path in paths:
        base = sweep_base(path, [])
        off = no_overlap(base[1])
        read = {(): base, off: sweep_base(path, list(off))}
        layouts = enumerate_layouts(read[()][0])
        for lay in rng.sample(layouts, min(per_scenario, len(layouts))):
            ov = off if rng.random() < 0.5 else ()
            tasks.append((path, read[ov][1], read[ov][2], lay, ov))
    return tasks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*", default=[str(ROOT / s) for s in SCENARIOS])
    ap.add_argument("--per-scenario", type=int, default=25)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--worst", type=int, default=10, help="layouts to list")
    args = ap.parse_args(argv)
    runner = make_runner(args.jobs)
    try:
        rows = runner.map(both, sample(args.scenarios, args.per_scenario, args.seed))
    finally:
        runner.close()
    off = sorted((abs(r["engine_s"] / r["analytic_s"] - 1) for r in rows))
    print(f"{len(rows)} layouts (seed {args.seed}): engine / analytic step time off by a median "
          f"{statistics.median(off):.1%}, p90 {off[int(0.9 * len(off))]:.1%}, max {off[-1]:.1%}; "
          f"within 5 % for {sum(x <= 0.05 for x in off) / len(off):.0%}")
    print("\nmost apart:")
    for r in sorted(rows, key=lambda r: -abs(r["engine_s"] / r["analytic_s"] - 1))[: args.worst]:
        differs = ", ".join(f"{k.removesuffix('_s')} {v:+.2f} s" for k, v in r["differs"].items())
        print(f"  {r['engine_s'] / r['analytic_s']:5.2f}x  {r['scenario']:16s} {r['layout']:58s} "
              f"{r['overrides']:28s} analytic {r['analytic_s']:7.2f} s  engine {r['engine_s']:7.2f} s  "
              f"(engine - analytic: {differs or 'none over 2 %'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
