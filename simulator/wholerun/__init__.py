"""The whole training run: days, GPU-hours, cost, interruptions, checkpoints and goodput (issue 41).

`spec` reads the scenario's `run:` section (tokens, phases, checkpoint and failure settings); `failures`
holds the sourced interruption rates and the Young/Daly checkpoint-interval formulas; `checkpoint` sizes a
checkpoint from the memory model's states and prices its write; `model` combines them per phase into a
`WholeRun`; `report`, `plot` and `cli_hooks` show it. Nothing here changes a step's numbers.
"""
