"""The kernel data file's checks (`kernel_data.load_data`): every point has the fields its table reads, a positive
TFLOP/s, a known family and phase, a parseable cuDNN release; every transfer names a GPU of the file and says why."""
from __future__ import annotations

from ..errors import ScenarioError
from . import cudnn_release

FAMILIES = ("flash2", "flash3", "cudnn", "triton_fa")
"""Attention kernel families: FlashAttention-2 and -3, cuDNN's fused attention, and the Triton FlashAttention MPT
runs (LLM Foundry's flash_attn_triton.py, `attn_impl: triton`)."""
PHASES = ("fwd", "bwd", "fwd_bwd")
"""Phases of an attention point: forward, backward, or a forward+backward figure (split by `phase_points`)."""
MLA_FIELDS = ("family", "dtype", "phase", "causal", "d_qk", "d_v", "seq", "tflops", "source", "url")
"""What a multi-head latent attention point (`mla_attention`) states: its two head dims instead of one."""
FP8_ATTENTION_FIELDS = ("family", "dtype", "phase", "causal", "d_head", "seq", "tflops", "bf16_tflops", "cudnn_version",
                        "source", "url")
"""What an FP8 attention point (`fp8_attention`) states: its own figure, the same run's BF16 figure, its release."""


def check_data(data: dict, where: str) -> None:
    """`ScenarioError` naming the first point or entry of `data` (the parsed file) that is not as the tables need."""
    need = {"gemm": ("dtype", "m", "n", "k", "tflops", "source", "url"),
            "attention": ("family", "dtype", "phase", "causal", "d_head", "seq", "tflops", "source", "url")}
    for gpu, entry in data["gpus"].items():
        for table, fields in need.items():
            for i, p in enumerate(entry.get(table, [])):
                _check_point(p, fields, f"{where}: gpus.{gpu}.{table}[{i}]")
                if table == "attention" and p["family"] not in FAMILIES:
                    raise ScenarioError(f"{where}: gpus.{gpu}.attention[{i}].family", f"{p['family']!r} is unknown",
                                        " | ".join(FAMILIES))
                if table == "attention" and p["phase"] not in PHASES:
                    raise ScenarioError(f"{where}: gpus.{gpu}.attention[{i}].phase", f"{p['phase']!r} is unknown",
                                        " | ".join(PHASES))
                if table == "attention" and "cudnn_version" in p:
                    at = f"{where}: gpus.{gpu}.attention[{i}].cudnn_version"
                    if p["family"] != "cudnn":
                        raise ScenarioError(at, f"given on a {p['family']} point", "cudnn points only")
                    cudnn_release.release(p["cudnn_version"], at)
        for i, p in enumerate(entry.get("fp8_attention", [])):
            at = f"{where}: gpus.{gpu}.fp8_attention[{i}]"
            _check_point(p, FP8_ATTENTION_FIELDS, at)
            if p["family"] != "cudnn" or p["dtype"] != "fp8" or p["phase"] not in ("fwd", "bwd"):
                raise ScenarioError(at, f"family {p['family']!r}, dtype {p['dtype']!r}, phase {p['phase']!r}",
                                    "family cudnn, dtype fp8, phase fwd | bwd")
            if not (isinstance(p["bf16_tflops"], (int, float)) and p["bf16_tflops"] > 0):
                raise ScenarioError(f"{at}.bf16_tflops", f"{p['bf16_tflops']!r}", "a positive number")
            cudnn_release.release(p["cudnn_version"], f"{at}.cudnn_version")
        for i, p in enumerate(entry.get("mla_attention", [])):
            at = f"{where}: gpus.{gpu}.mla_attention[{i}]"
            _check_point(p, MLA_FIELDS, at)
            if p["family"] not in FAMILIES or p["phase"] not in ("fwd", "bwd"):
                raise ScenarioError(at, f"family {p['family']!r}, phase {p['phase']!r}",
                                    f"a family of {' | '.join(FAMILIES)}, phase fwd | bwd")
        _check_split(data["gpus"], gpu, f"{where}: gpus.{gpu}.fwd_bwd_split")
        for key in ("head_dim_ratio", "fp8_gemm_from", "fp4_gemm_from", "gemm_from", "attention_from"):
            by = entry.get(key)
            if by is not None and not (isinstance(by, dict) and by.get("gpu") in data["gpus"] and by["gpu"] != gpu
                                       and by.get("rule") and by.get("why")):
                raise ScenarioError(f"{where}: gpus.{gpu}.{key}", f"{by!r}",
                                    "{gpu: another GPU of this file, rule: what it prices, why: the evidence for it}")
        by = entry.get("attention_from")
        if by is not None and (entry.get("attention") or not data["gpus"][by["gpu"]].get("attention")
                               or data["gpus"][by["gpu"]].get("attention_from")):
            raise ScenarioError(f"{where}: gpus.{gpu}.attention_from", f"{by['gpu']!r}",
                                "a GPU with attention points of its own, for a GPU that has none")
        by = entry.get("fp4_gemm_from")
        if by is not None and not (isinstance(by.get("peak_tflops"), dict) and {"bf16", "fp4"} <= set(by["peak_tflops"])):
            raise ScenarioError(f"{where}: gpus.{gpu}.fp4_gemm_from.peak_tflops", f"{by.get('peak_tflops')!r}",
                                "{bf16: ..., fp4: ...}: the dense peaks the named GPU's points are fractions of")
    if not isinstance(data.get("transfers", {}), dict):
        raise ScenarioError(f"{where}: transfers", "expected an object",
                            "family -> {base, gpu, phase, rule, points, forward_gap (optional)}")
    for family, t in data.get("transfers", {}).items():
        at = f"{where}: transfers.{family}"
        if family not in FAMILIES or not isinstance(t, dict) or t.get("base") not in FAMILIES or t.get("base") == family:
            raise ScenarioError(at, "needs a known family with a different known base family",
                                f"a family of {' | '.join(FAMILIES)} -> {{base, gpu, phase, rule, points}}")
        missing = [f for f in ("gpu", "phase", "rule", "points") if f not in t]
        if missing:
            raise ScenarioError(at, f"lacks {', '.join(missing)}", "base, gpu, phase, rule, points")
        gap = t.get("forward_gap")
        if gap is not None and not (isinstance(gap, dict) and isinstance(gap.get("value"), (int, float))
                                    and gap["value"] >= 1 and gap.get("source")):
            raise ScenarioError(f"{at}.forward_gap", f"{gap!r}",
                                "{value: base / family forward speed (a number >= 1), source: where it is published}")
        for i, p in enumerate(t["points"]):
            _check_point(p, need["attention"], f"{at}.points[{i}]")
            if p["family"] not in (family, t["base"]) or p["phase"] != t["phase"]:
                raise ScenarioError(f"{at}.points[{i}]", f"family {p['family']!r}, phase {p['phase']!r}",
                                    f"family {family} or {t['base']}, phase {t['phase']}")


def _check_split(gpus: dict, gpu: str, at: str) -> None:
    """A GPU with fwd_bwd points names another GPU (`fwd_bwd_split.gpu`, with its `rule`) that has forward and
    backward points of each family those points are of: the balance `phase_points` splits them by."""
    families = sorted({p["family"] for p in gpus[gpu].get("attention", []) if p["phase"] == "fwd_bwd"})
    if not families:
        return
    split = gpus[gpu].get("fwd_bwd_split")
    allowed = "{gpu: another GPU of this file with fwd and bwd points of the family, rule: how it splits}"
    if not isinstance(split, dict) or split.get("gpu") not in gpus or split["gpu"] == gpu or not split.get("rule"):
        raise ScenarioError(at, f"{split!r}: fwd_bwd points of {', '.join(families)} need a GPU to split them by",
                            allowed)
    ref = gpus[split["gpu"]].get("attention", [])
    for family in families:
        lacking = [ph for ph in ("fwd", "bwd") if not any(p["family"] == family and p["phase"] == ph for p in ref)]
        if lacking:
            raise ScenarioError(f"{at}.gpu", f"{split['gpu']!r} has no {family} {' or '.join(lacking)} points",
                                allowed)


def _check_point(p: dict, fields: tuple, at: str) -> None:
    """A published point has every field its table reads and a positive TFLOP/s."""
    missing = [f for f in fields if f not in p]
    if missing:
        raise ScenarioError(at, f"lacks {', '.join(missing)}", ", ".join(fields))
    if not (isinstance(p["tflops"], (int, float)) and p["tflops"] > 0):
        raise ScenarioError(f"{at}.tflops", f"{p['tflops']!r}", "a positive number")
