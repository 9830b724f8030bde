"""The link model re-shares once per instant (engine/links.py): transfers that start or end at the same
simulated time, added one by one by different processes, are re-shared together when the instant is
over, each connected set of transfers on its own; the speeds are those of re-sharing after each."""
import random

import pytest
from test_engine_contention import run_flows

from simulator.cost.network import Transfer, fair_share_finish_times
from simulator.evaluate import links as links_mod
from simulator.evaluate.links import fluid_ends


def run_counting(specs, monkeypatch):
    """specs: (start, dur, {link: u}), each added by its own process at its start -> (ends, flow counts of
    the progressive fillings the link model ran)."""
    fillings = []
    real = links_mod.max_min_speeds

    def counting(flows):
        fillings.append(len(flows))
        return real(flows)

    monkeypatch.setattr(links_mod, "max_min_speeds", counting)
    return run_flows(specs), fillings


def group_and_sends(n, base=""):
    """One collective on the NICs of n ranks (in and out) and, at the same instant, one send out of each
    rank's NIC: what every-rank mode does when a data-parallel group's ranks send their activations."""
    coll = {(f"{base}{r}", "nic", d): 0.98 for r in range(n) for d in ("out", "in")}
    return [(0.0, 8.0, coll)] + [(0.0, 0.75, {(f"{base}{r}", "nic", "out"): 0.96}) for r in range(n)]


def test_sends_at_one_instant_on_one_collectives_links_are_shared_in_one_filling(monkeypatch):
    ends, fillings = run_counting(group_and_sends(16), monkeypatch)
    # the instant the sends start, and the instant they all end (the collective then runs alone: no filling)
    assert fillings == [17]
    assert ends == pytest.approx(fluid_ends(group_and_sends(16)), rel=1e-12)


def test_disconnected_sets_at_one_instant_are_filled_each_on_its_own(monkeypatch):
    specs = group_and_sends(4, "a") + group_and_sends(6, "b")
    ends, fillings = run_counting(specs, monkeypatch)
    assert sorted(fillings) == [5, 7]
    assert ends == pytest.approx(fluid_ends(specs), rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_many_transfers_on_few_instants_end_as_the_max_min_solver_says(seed, monkeypatch):
    """Starts drawn from three instants, so re-shares batch several arrivals and ends; the ends are still
    network.py's max-min solution."""
    rng = random.Random(seed)
    names = ["a", "b", "c", "d"]
    specs = []
    for _ in range(12):
        use = {l: rng.uniform(0.2, 1.0) for l in rng.sample(names, rng.randint(1, 3))}
        top = max(use.values())
        specs.append((rng.choice([0.0, 0.5, 1.25]), rng.uniform(0.1, 1.0), {l: u / top for l, u in use.items()}))
    transfers = [Transfer(str(i), s, {l: u * d for l, u in dem.items()}) for i, (s, d, dem) in enumerate(specs)]
    want = fair_share_finish_times(transfers, {l: 1.0 for l in names})
    ends, _ = run_counting(specs, monkeypatch)
    assert ends == pytest.approx(want, rel=1e-9)
