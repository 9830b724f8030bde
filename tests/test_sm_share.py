"""`sm_share.slowed_end`: a compute op runs at 1 - s while collectives are in flight beside it."""
import pytest

from simulator.evaluate.sm_share import beside_end, slowed_end


def test_alone_or_without_a_share_it_takes_its_own_time():
    assert slowed_end(1.0, 2.0, [], 0.3) == 3.0
    assert slowed_end(1.0, 2.0, [(0.0, 10.0)], 0.0) == 3.0
    assert slowed_end(5.0, 2.0, [(0.0, 4.0)], 0.3) == 7.0  # the collective ended before it started


def test_under_a_longer_collective_it_runs_at_the_reduced_rate():
    assert slowed_end(0.0, 1.4, [(0.0, 10.0)], 0.3) == pytest.approx(2.0)


def test_beside_a_shorter_collective_it_loses_the_share_of_the_overlap():
    # g + s * c: the GEMM (2 s) keeps 70 % of its rate for the collective's 1 s
    assert slowed_end(0.0, 2.0, [(0.0, 1.0)], 0.3) == pytest.approx(2.3)
    # overlapping collectives count once; a gap between two runs at full rate
    assert slowed_end(0.0, 2.0, [(0.0, 0.5), (0.25, 1.0)], 0.3) == pytest.approx(2.3)
    assert slowed_end(0.0, 3.0, [(0.0, 1.0), (2.0, 2.5)], 0.5) == pytest.approx(3.0 + 0.5 + 0.25)



def test_collectives_of_different_shares_each_slow_the_op_by_their_own():
    """Disjoint collectives at 0.5 over [0, 1] and 0.25 over [2, 3]; 3 s of work: 0.5 s done by t = 1,
    1.5 by t = 2, 2.25 by t = 3, the last 0.75 at full rate: ends at 3.75."""
    end, dim = beside_end(0.0, 3.0, [(0.0, 1.0, "ep", 0.5), (2.0, 3.0, "tp", 0.25)])
    assert end == pytest.approx(3.75)
    assert dim in ("ep", "tp")


def test_where_collectives_overlap_the_largest_share_counts():
    one, _ = beside_end(0.0, 2.0, [(0.0, 1.0, "ep", 0.5)])
    both, _ = beside_end(0.0, 2.0, [(0.0, 1.0, "ep", 0.5), (0.2, 0.8, "tp", 0.25)])
    assert both == pytest.approx(one) == pytest.approx(2.5)


def test_one_share_for_all_is_the_single_share_path():
    busy = [(0.0, 0.5, "ep", 0.3), (0.25, 1.0, "ep", 0.3)]
    assert beside_end(0.0, 2.0, busy)[0] == pytest.approx(slowed_end(0.0, 2.0, busy, 0.3)) == pytest.approx(2.3)
