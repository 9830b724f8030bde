"""The three evaluators on one scenario, for the tests that check they agree (heterogeneous clusters:
pools, degraded links): the analytic listing, the engine's representative mode and the engine's --full."""
from simulator.cost.costs import build_cost_model
from simulator.evaluate.analytic import estimate
from simulator.evaluate.engine import simulate_engine


def three_step_times(sc) -> tuple[float, float, float]:
    """(analytic, engine representative, engine --full) iteration times of `sc`."""
    cost = build_cost_model(sc)
    return (estimate(sc, cost).iteration_time_s, simulate_engine(sc, cost).iteration_time_s,
            simulate_engine(sc, cost, full=True).iteration_time_s)
