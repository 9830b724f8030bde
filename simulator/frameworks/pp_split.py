"""How a framework splits a model's layers over pipeline stages, where it does not need them to divide.

torchtitan (`torchtitan/distributed/pipeline_parallel.py`, v0.2.2 lines 59-121 and 236-340) counts the
embedding and the output (norm + LM head) as one layer each: L_eff = L + 2 over S = pp x vpp stages, each
floor(L_eff / S), the first L_eff mod S one more; the first stage then holds one decoder layer fewer (the
embedding's place), the last one fewer (the output's). 80 layers at pp 32: 82 = 18 x 3 + 14 x 2.

nanotron (`models/base.py: build_model`, `LlamaModel.get_block_compute_costs`) walks the pipeline blocks in
order: embedding (cost 0), the decoder layers (cost 4*h^2 + 3*h*f each: `4 * heads * d_head * hidden +
3 * ffn * hidden`, multi-head attention assumed whatever the KV heads), final norm (0), LM head (V*h),
fp32 cast (0), loss (0). A block goes to the current rank; the rank advances once the cumulative cost
passes `total * (rank + 1) / pp`. So it accepts pp = 32 for 80 layers, and its stages are uneven even
where the layers divide (the LM head's cost pushes layers forward): the 1B (16 layers, V = 128K) at pp 2
runs 10 + 6 layers.
"""
from __future__ import annotations


def nanotron_pp_layers(layers: int, hidden: int, ffn_hidden: int, heads: int, vocab: int, pp: int,
                       inclusive: bool = True) -> list[int]:
    """Decoder layers per pipeline rank as nanotron assigns them (module docstring).

    `inclusive`: the rank advances on reaching its threshold (nanotron's code after its PP fix; the
    playbook CSV's `Local Params` column shows it: 1B, pp=2: 10 + 6 layers) or only on exceeding it
    (earlier code: 11 + 5); the two agree unless a threshold falls exactly on a layer boundary. Trailing
    ranks may get no layer at all."""
    d = hidden // heads
    layer_cost = 4 * heads * d * hidden + 3 * ffn_hidden * hidden
    costs = [0] + [layer_cost] * layers + [0, vocab * hidden, 0, 0]
    total = sum(costs)
    thresholds = [total * (r + 1) / pp for r in range(pp)]
    counts = [0] * pp
    rank, cum = 0, 0
    for i, c in enumerate(costs):
        cum += c
        if 1 <= i <= layers:
            counts[rank] += 1
        passed = cum >= thresholds[rank] if inclusive else cum > thresholds[rank]
        if passed and rank < pp - 1:
            rank += 1
    return counts


def remainder_first_layers(layers: int, stages: int) -> list[int]:
    """torchtitan's split of `layers` decoder layers over `stages` model chunks (module docstring)."""
    eff = layers + 2
    counts = [eff // stages + (1 if s < eff % stages else 0) for s in range(stages)]
    counts[0] -= 1
    counts[-1] -= 1
    return counts


def cost_balanced_layers(model, pp: int) -> list[int]:
    """nanotron's split of `model` (a `ModelSpec`) over `pp` stages."""
    return nanotron_pp_layers(model.layers, model.hidden, model.ffn_hidden, model.heads, model.vocab, pp)
