"""How long a job with stragglers takes to simulate (issue 42's bar: Llama-3-405B on 16,384 GPUs with 3
stragglers in <= 10 s on the 2-core machine). Prints a table; run on an idle machine.

    python benchmarks/stragglers_speed.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.run import simulate  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

CASES = [
    ("405B, 16,384 GPUs, homogeneous", []),
    ("405B, 16,384 GPUs, 3 stragglers", ["cluster.stragglers=[{rank: 17, slowdown: 1.2}, {rank: 9000, slowdown: 1.5}, "
                                         "{node: 1500, slowdown: 1.1}]"]),
    ("405B, 16,384 GPUs, 0.1 % slow at random", ["cluster.slow_gpus={share: 0.001, slowdown_min: 1.1, slowdown_max: 1.4}"]),
]


def main() -> int:
    print(f"{'case':<45} {'estimator':<9} {'wall s':>7} {'step s':>8} {'straggler cost s':>17}")
    for label, overrides in CASES:
        sc = load_scenario(ROOT / "scenarios" / "405b_16k.yaml", overrides)
        for estimator in ("analytic", "engine"):
            t0 = time.perf_counter()
            r = simulate(sc, estimator=estimator)
            wall = time.perf_counter() - t0
            print(f"{label:<45} {estimator:<9} {wall:7.2f} {r['iteration_time_s']:8.3f} {r['stragglers']['cost_s']:17.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
