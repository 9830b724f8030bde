"""Memory model against published numbers: prints predicted vs reference, exits 1 on any miss.

Run from anywhere: `python validation/memory_reference.py`. Checks:
  * KOR22 Table 2 per-layer formulas (Eq. 1, 2, 4, selective, full) for the KOR22 Table 3 GPT models
    (22B, 175B, 530B, 1T; s = 2048, t = 8), exact; and KOR22 §5's "selective removes 70 %" for GPT-3;
  * ZeRO §5.1-5.3 bytes/param (K = 12, 16-bit grads) and the 7.5B example at N_d = 64
    (120 GB -> 31.4 / 16.6 / 1.9 GB);
  * Megatron distributed-optimizer table (MEG-DO, docs/modeling.md §3.1): bf16 params + fp32 grads 18 and
    6 + 12/d, fp32 16 and 8 + 8/d;
  * the Llama-3-70B worked example of docs/modeling.md §8.
The GPT scenarios are built with `scenario_from_mapping` from a model mapping (arch gpt).
"""
from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.plan.memory import (GIB, activation_bytes_in_flight, activation_bytes_per_layer,  # noqa: E402
                              head_activation_terms, inflight_microbatches, memory_report, static_bytes)
from simulator.plan.sharded_params import rank_params  # noqa: E402
from simulator.scenario import load_scenario, scenario_from_mapping  # noqa: E402

SCENARIO_70B = ROOT / "scenarios" / "70b_512gpu.yaml"
EXACT = 1e-12
"""Relative tolerance for formula identities (float rounding only)."""

KOR22_SEQ = 2048
KOR22_VOCAB = 51200
"""Padded GPT vocabulary of Megatron's GPT runs (NAR21); not used by the per-layer checks."""
KOR22_MODELS = {
    # name: (attention heads a, hidden h, layers L, tensor parallel t)   KOR22 Table 3 (= NAR21 Table 1 rows)
    "22B": (64, 6144, 48, 8),
    "175B (GPT-3)": (96, 12288, 96, 8),
    "530B": (128, 20480, 105, 8),
    "1T": (160, 25600, 128, 8),
}
ZERO_PSI = 7.5e9
ZERO_NDP = 64
ZERO_PAPER_GB = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}
"""ZeRO §5 / Figure 1: model states of a 7.5B model at N_d = 64 (rounded to 0.1 GB in the paper)."""
ZERO_ROUNDING_GB = 0.05
WORKED_70B = {"states_gb": 9.01, "act_34_gb": 11.41, "eager_gb": 65.1, "logits_mb": 263.0}
"""docs/modeling.md §8.2 (stage 0 of Llama-3-70B, TP8 PP8 DP8, s = 4096, b = 1, 1F1B, SP, selective/flash)."""
ROUNDED = 0.005
"""Relative tolerance against numbers printed to 3 significant digits."""


def gpt_scenario(a: int, h: int, layers: int, t: int, **training) -> object:
    """One DGX node (t GPUs) running a KOR22-style GPT layer stack, dp = pp = 1, micro-batch 1."""
    tr = {"seq_len": KOR22_SEQ, "global_batch": 1, "micro_batch": 1, "precision": "bf16",
          "recompute": "none", "attention": "eager"}
    tr.update(training)
    sp = tr.pop("sp", False)
    raw = {"name": "kor22", "model": {"arch": "gpt", "layers": layers, "hidden": h, "ffn_hidden": 4 * h, "heads": a,
                                      "vocab": KOR22_VOCAB, "tie_embeddings": True, "positions": KOR22_SEQ},
           "training": tr, "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus_per_node": t},
           "parallel": {"tp": t, "pp": 1, "dp": 1, "sp": sp}}
    return scenario_from_mapping(raw)


def close(pred: float, ref: float, rel: float) -> bool:
    return abs(pred - ref) <= rel * abs(ref)


def kor22_rows() -> list[tuple]:
    rows = []
    for name, (a, h, L, t) in KOR22_MODELS.items():
        s, b = KOR22_SEQ, 1
        sbh = s * b * h
        att = Fraction(5 * a * s, h)
        cases = [  # label, scenario knobs, KOR22 Table 2 bytes per layer
            ("no parallelism (Eq. 1)", dict(tp=1), sbh * (34 + att)),
            ("TP (Eq. 2)", dict(tp=t), sbh * (10 + Fraction(24, t) + att / t)),
            ("TP+SP (Eq. 4)", dict(tp=t, sp=True), Fraction(sbh, t) * (34 + att)),
            ("TP + selective", dict(tp=t, recompute="selective"), sbh * (10 + Fraction(24, t))),
            ("TP+SP + selective", dict(tp=t, sp=True, recompute="selective"), Fraction(sbh * 34, t)),
            ("full recompute", dict(tp=t, recompute="full"), Fraction(2 * sbh)),
        ]
        for label, knobs, ref in cases:
            tp = knobs.pop("tp")
            sc = gpt_scenario(a, h, L, tp, **knobs)
            pred = activation_bytes_per_layer(sc, 0)
            rows.append((f"KOR22 {name}: {label}", pred / sbh, float(ref) / sbh, "x sbh", close(pred, float(ref), EXACT)))
    a, h, L, t = KOR22_MODELS["175B (GPT-3)"]
    none = activation_bytes_per_layer(gpt_scenario(a, h, L, t, sp=True), 0)
    sel = activation_bytes_per_layer(gpt_scenario(a, h, L, t, sp=True, recompute="selective"), 0)
    rows.append(("KOR22 §5 GPT-3: selective saves (TP+SP)", 1 - sel / none, 0.70, "share", close(1 - sel / none, 0.70, 0.005)))
    return rows


def zero_rows() -> list[tuple]:
    """7.5B-class GPT on 64 GPUs (8 DGX nodes), pure DP, bf16 weights and grads (K = 12)."""
    rows = []
    ref_bpp = {0: Fraction(16), 1: 4 + Fraction(12, ZERO_NDP), 2: 2 + Fraction(14, ZERO_NDP), 3: Fraction(16, ZERO_NDP)}
    for stage in range(4):
        raw = {"name": "zero-7.5b", "model": {"arch": "gpt", "layers": 36, "hidden": 4096, "ffn_hidden": 16384, "heads": 32,
                                              "vocab": KOR22_VOCAB, "tie_embeddings": True},
               "training": {"seq_len": 1024, "global_batch": 64, "precision": "bf16", "grad_dtype": "bf16"},
               "cluster": {"topology": "dgx-h100", "nodes": ZERO_NDP // 8},
               "parallel": {"dp": ZERO_NDP, "zero": stage},
               "framework": "deepspeed"}  # the ZeRO paper's stages are DeepSpeed's (Megatron's 2 is its 1)
        sc = scenario_from_mapping(raw)
        bpp = sum(static_bytes(sc, 0).values()) / rank_params(sc, 0).total
        rows.append((f"ZeRO stage {stage}: bytes/param (N_d=64)", bpp, float(ref_bpp[stage]), "B/param",
                     close(bpp, float(ref_bpp[stage]), EXACT)))
        gb = bpp * ZERO_PSI / 1e9
        rows.append((f"ZeRO stage {stage}: 7.5B model states", gb, ZERO_PAPER_GB[stage], "GB",
                     abs(gb - ZERO_PAPER_GB[stage]) <= ZERO_ROUNDING_GB))
    return rows


def megatron_rows() -> list[tuple]:
    """Llama-3-8B, pure DP over one 8-GPU node (d = 8), Megatron's fp32 main grads."""
    rows = []
    d = 8
    for precision, zero, ref, label in [("bf16", 0, 18.0, "bf16/fp32, no DO: 18"), ("bf16", 1, 6 + 12 / d, "bf16/fp32, DO: 6+12/d"),
                                        ("fp32", 0, 16.0, "fp32/fp32, no DO: 16"), ("fp32", 1, 8 + 8 / d, "fp32/fp32, DO: 8+8/d")]:
        raw = {"name": "meg-do", "model": "llama3-8b", "training": {"seq_len": 4096, "global_batch": 8, "precision": precision},
               "cluster": {"topology": "dgx-h100", "nodes": 1}, "parallel": {"dp": d, "zero": zero}}
        sc = scenario_from_mapping(raw)
        bpp = sum(static_bytes(sc, 0).values()) / rank_params(sc, 0).total
        rows.append((f"MEG-DO {label}", bpp, ref, "B/param", close(bpp, ref, EXACT)))
    return rows


def llama70b_rows() -> list[tuple]:
    rows = []
    sc = load_scenario(SCENARIO_70B)
    m = sc.model
    s, b, h, t, p = sc.training.seq_len, sc.training.micro_batch, m.hidden, sc.parallel.tp, sc.parallel.pp
    L_stage = m.layers // p
    ids = 8 * s * b
    states = sum(static_bytes(sc, 0).values())
    rows.append(("70B stage 0 model states (7.5 B/param)", states / 1e9, WORKED_70B["states_gb"], "GB",
                 close(states / 1e9, WORKED_70B["states_gb"], ROUNDED)))
    per_layer = s * b * (12 * h + 4 * m.kv_dim + 6 * m.ffn_hidden) / t  # docs/modeling.md §3.2 (33.5 sbh/t here)
    act = activation_bytes_in_flight(sc, 0)
    ref = p * L_stage * per_layer + p * ids
    rows.append(("70B stage 0 activations = 80 x sb(12h+4h_kv+6f)/t + ids", act / 1e9, ref / 1e9, "GB", close(act, ref, EXACT)))
    rows.append(("70B stage 0 activations vs 34 sbh/t (docs/modeling.md §8.2)", act / 1e9, WORKED_70B["act_34_gb"], "GB",
                 close(act / 1e9, WORKED_70B["act_34_gb"], 0.02)))
    rep = memory_report(sc)
    rows.append(("70B fits in the H100's 79.65 GiB (peak GiB)", rep.peak_gib, rep.capacity_gib, "GiB", rep.fits))
    last = activation_bytes_in_flight(sc, p - 1)
    ref_last = L_stage * per_layer + 4 * s * b * h / t + 4 * s * b * m.vocab / t + 12 * s * b
    rows.append(("70B stage 7: 10 layers + KOR22 §4.3 head + labels", last / 1e9, ref_last / 1e9, "GB", close(last, ref_last, EXACT)))
    logits = head_activation_terms(sc)["logits"]
    rows.append(("70B fp32 logits 4sbV/t", logits / 1e6, WORKED_70B["logits_mb"], "MB", close(logits / 1e6, WORKED_70B["logits_mb"], ROUNDED)))
    full = load_scenario(SCENARIO_70B, ["training.recompute=full"])
    act_full = activation_bytes_in_flight(full, 0)
    rows.append(("70B full recompute: 80 x 2sbh/t + ids (derived)", act_full / 1e9, (p * L_stage * 2 * s * b * h / t + p * ids) / 1e9, "GB",
                 close(act_full, p * L_stage * 2 * s * b * h / t + p * ids, EXACT)))
    for v, ref_mult in [(2, 1.4375), (5, 1.175), (10, 1.0875)]:
        sv = load_scenario(SCENARIO_70B, ["parallel.pp_schedule=interleaved-1f1b", f"parallel.vpp={v}"])
        n = inflight_microbatches(sv, 0)
        rows.append((f"70B interleaved v={v}: micro-batches on rank 0 (KOR22 4.2.3)", n, p * ref_mult, "mb", close(n, p * ref_mult, EXACT)))
    eager = ["training.attention=eager", "training.recompute=none"]
    se = load_scenario(SCENARIO_70B, eager)
    a = m.heads
    ref_e = p * L_stage * (per_layer + 2 * a * s * s * b / t) + p * ids  # llama: softmax output only, no dropout
    act_e = activation_bytes_in_flight(se, 0)
    rows.append(("70B eager, no recompute (llama: + 2as^2b/t)", act_e / 1e9, ref_e / 1e9, "GB", close(act_e, ref_e, EXACT)))
    twin = load_scenario(SCENARIO_70B, eager + ["model.arch=gpt", "model.kv_heads=64", f"model.ffn_hidden={4 * h}"])
    act_t = activation_bytes_in_flight(twin, 0)
    rows.append(("70B GPT twin (dropout, MHA, 4h MLP), eager: docs/modeling.md §8.2, 65.1 GB", act_t / 1e9, WORKED_70B["eager_gb"], "GB",
                 close(act_t / 1e9, WORKED_70B["eager_gb"], ROUNDED)))
    return rows


def main() -> int:
    rows = kor22_rows() + zero_rows() + megatron_rows() + llama70b_rows()
    width = max(len(r[0]) for r in rows)
    print(f"{'check':<{width}}  {'predicted':>12}  {'reference':>12}  {'unit':<8} ok")
    for name, pred, ref, unit, ok in rows:
        print(f"{name:<{width}}  {pred:>12.6g}  {ref:>12.6g}  {unit:<8} {'yes' if ok else 'MISS'}")
    misses = sum(1 for r in rows if not r[4])
    print(f"\n{len(rows) - misses}/{len(rows)} checks pass")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
