"""A rank's coordinates on the rank grid (plan/layout.py), read off its flat index: each rank sits where
the grid says, and every group it is in holds it and is the same group from each of its members."""
import pytest

from simulator.plan.layout import coords, group_ranks, rank_grid
from test_engine import scenario


@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "tp-ep-dp-cp-pp", "pp-ep-dp-cp-tp"])
def test_each_rank_sits_at_its_coordinates(order):
    sc = scenario(pp=2, dp=2, tp=2, cp=2, order=order)
    grid, dims = rank_grid(sc)
    for r in range(sc.gpus):
        c = coords(sc, r)
        assert int(grid[tuple(c[d] for d in dims)]) == r


@pytest.mark.parametrize("dim", ["tp", "cp", "dp", "pp", "dp_cp"])
def test_a_group_is_the_same_from_each_of_its_members(dim):
    sc = scenario(pp=2, dp=2, tp=2, cp=2, order="tp-cp-ep-dp-pp")
    for r in range(sc.gpus):
        members = group_ranks(sc, dim, r)
        assert r in members
        assert all(group_ranks(sc, dim, x) == members for x in members)
