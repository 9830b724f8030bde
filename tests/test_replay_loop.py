"""validation/replay_loop.py's judging: the bar on the steady-host error when there is one, and a replay
whose rank a signal killed run once more (and said so), never silently."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("replay_loop", ROOT / "validation" / "replay_loop.py")
replay_loop = importlib.util.module_from_spec(spec)
spec.loader.exec_module(replay_loop)

KILLED = {"scenario": "zero3-dp2.yaml", "error": "exit 1: error: rank 1 died (signal SIGABRT); the other ranks were stopped"}


def test_a_replay_whose_rank_was_killed_runs_once_more_and_says_so():
    rows = iter([dict(KILLED), {"scenario": "zero3-dp2.yaml", "measured": {}}])
    row = replay_loop.replay_once_more_if_killed(lambda: next(rows))
    assert "measured" in row and row["retried_after"] == KILLED["error"]


def test_a_second_kill_or_another_failure_is_reported_as_it_is():
    calls = []

    def run():
        calls.append(1)
        return dict(KILLED)
    row = replay_loop.replay_once_more_if_killed(run)
    assert len(calls) == 2 and "died (signal" in row["error"] and "measured" not in row
    calls.clear()
    timeout = {"scenario": "x", "error": "exit 1: error: rank 0 timed out"}
    assert replay_loop.replay_once_more_if_killed(lambda: calls.append(1) or dict(timeout)) == timeout
    assert len(calls) == 1


def test_the_bar_is_judged_on_the_steady_error_when_enough_steps_were_steady():
    steady = {"relative_error": {"iteration_time_s": -0.30}, "steady_host": {"relative_error": -0.10}}
    assert replay_loop.verdict_error(steady) == (-0.10, "steady") and replay_loop.meets_bar(steady)
    unsteady = {"relative_error": {"iteration_time_s": -0.30}, "steady_host": {"relative_error": None}}
    assert replay_loop.verdict_error(unsteady) == (-0.30, "all") and not replay_loop.meets_bar(unsteady)


def _row(name, err=None, steady=None, rnd=1):
    if err is None:
        return {"scenario": name, "error": "exit 1: error: rank 0 timed out", "round": rnd}
    return {"scenario": name, "round": rnd, "measured": {}, "relative_error": {"iteration_time_s": err},
            "steady_host": {"relative_error": steady}}


def test_rounds_are_judged_on_each_plans_median_verdict_error():
    rows = [_row("dp2.yaml", -0.40, steady=-0.12, rnd=1), _row("pp2.yaml", -0.30, rnd=1),
            _row("dp2.yaml", +0.33, rnd=2), _row("pp2.yaml", None, rnd=2),
            _row("dp2.yaml", -0.05, rnd=3), _row("pp2.yaml", -0.10, rnd=3)]
    dp2, pp2 = replay_loop.round_summary(rows)
    assert dp2["scenario"] == "dp2.yaml" and dp2["errors"] == [-0.12, 0.33, -0.05]
    assert dp2["median"] == -0.05 and abs(dp2["spread"] - 0.45) < 1e-12 and dp2["median_meets_bar"]
    assert dp2["failed"] == 0
    # a failed round counts as failed, and the median is over the rounds that ran
    assert pp2["errors"] == [-0.30, None, -0.10] and pp2["failed"] == 1
    assert abs(pp2["median"] - (-0.20)) < 1e-12 and pp2["median_meets_bar"] is False


def test_a_plan_that_never_ran_has_no_verdict():
    (only,) = replay_loop.round_summary([_row("cp2.yaml", None), _row("cp2.yaml", None, rnd=2)])
    assert only["median"] is None and only["median_meets_bar"] is None and only["failed"] == 2
    text = replay_loop.summary_table([only])
    assert "cp2.yaml" in text and text.splitlines()[-1].split()[-1] == "-"
