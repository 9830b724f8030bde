"""clustersim: a discrete-event cluster simulator for LLM training, calibrated on real kernels.

Data flows one way: scenario.py (YAML -> Scenario) -> ops.py (what each rank computes and sends) ->
analytic.py (fast estimate) or engine/ (SimPy timeline) -> report.py (terminal table, JSON).
This package never imports torch; everything that touches hardware lives in `calibrate/`.
"""
__version__ = "0.1.0"
