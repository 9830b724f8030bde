"""clustersim: a discrete-event cluster simulator for LLM training, calibrated on real kernels.

Data flows one way: scenario (YAML -> Scenario) -> plan/ (what every rank computes and sends, in one
plan) -> cost/ (how long each op takes) -> evaluate/ (when: the analytic listing or the SimPy engine,
both over the same plan) -> run.py (the report dict) -> report/, sweep/, cli/.
This package never imports torch; everything that touches hardware lives in `calibrate/`.
"""
__version__ = "0.1.0"
