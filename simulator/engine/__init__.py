"""The discrete-event engine: a SimPy timeline of one training step.

lower.py (schedule + ops -> per-stage programs) -> templates.py (each pass list-scheduled once) ->
sim.py / fabric.py (SimPy processes, streams, collectives) with links.py (concurrent transfers share
links max-min fairly) -> results.py (measured on the timeline) -> trace.py (Chrome trace) / plot.py
(matplotlib). Entry point: `simulate_engine` (`contention=False`: every transfer priced alone).
"""
from ..evaluate.results import EngineResult, StageResult
from .simulate import run_engine, simulate_engine

__all__ = ["EngineResult", "StageResult", "run_engine", "simulate_engine"]
