"""The discrete-event engine: a SimPy timeline of one training step.

It replays the plan (`plan/lower.py`) whose passes `evaluate/passes.py` list-schedules once each:
sim.py / fabric.py / state.py (SimPy processes, streams, collectives) with `evaluate/links.py` (concurrent
transfers share links max-min fairly) -> `evaluate/results.py` (measured on the timeline) -> trace.py
(Chrome trace) / plot.py (matplotlib). Entry point: `simulate_engine` (`contention=False`: every transfer priced alone).
"""
from ..results import EngineResult, StageResult
from .simulate import run_engine, simulate_engine

__all__ = ["EngineResult", "StageResult", "run_engine", "simulate_engine"]
