"""`calibrate replay`: run a scenario's parallel plan for real (torch.distributed) and compare it with
the simulator. See README.md in this folder for what is PyTorch's and what is ours.

plan.py (checks, exit 2) -> launch.py (spawn / torchrun, watchdog) -> meshes.py (process groups) ->
train.py (build, train, measure: llama.py, experts.py, ring_attention.py, tp.py, zero.py, dp.py,
pipeline.py, data.py) -> report.py (prediction, comparison, table) ; cli.py is the command.
"""
