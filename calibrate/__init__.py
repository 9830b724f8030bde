"""clustersim calibration: measure kernels and collectives on real hardware into a profile.

`python -m calibrate` (cli.py) runs the probes (probes/: one file per op kind, each with a reference
check, warm-up, repeats and achieved-vs-peak output, after llm.c's dev/cuda) and the collective sweep
(collectives.py), then writes a versioned JSON profile that `simulator/profile.py` reads (without torch).
`python -m calibrate replay` runs a scenario's plan for real (calibrate/replay/, a separate piece).
This is the only package that imports torch.
"""
