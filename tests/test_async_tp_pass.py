"""clustersim's async-TP pricing fuses what PyTorch's micro-pipeline TP pass fuses: the real Inductor pass run on a
torchtitan-style block on CPU (`calibrate/async_tp_pass.py`, in its own process), counted against the plan."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.plan.layer_ops import layer_passes
from simulator.plan.opgraph import Comm, Compute
from simulator.scenario import scenario_from_mapping

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent


def _torch_counts(*flags):
    out = subprocess.run([sys.executable, "-m", "calibrate.async_tp_pass", "--tp", "4", *flags], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _plan_counts(nodes):
    """The plan's pass in the probe's words: a fused all-gather leaves a local copy, a fused reduce-scatter a
    reduction; a TP collective that is neither a fused one's pulls is plain."""
    counts = {}

    def add(key):
        counts[key] = counts.get(key, 0) + 1

    for n in nodes:
        op = n.op
        if isinstance(op, Compute) and op.name.endswith("_local_copy"):
            add("fused_all_gather")
        elif isinstance(op, Compute) and op.name.endswith("_reduce") and op.kind == "elementwise":
            add("fused_reduce_scatter")
        elif isinstance(op, Comm) and op.dim == "tp" and not op.name.endswith("_pulls"):
            add(op.collective)
    return counts


@pytest.mark.slow
def test_the_plan_fuses_what_the_pass_fuses_in_torchtitans_llama_block():
    """Q, K and V one linear (torchtitan's Llama 3 at the commit the framework file reads), no recompute."""
    torch_counts = _torch_counts("--fused-qkv")
    sc = scenario_from_mapping({
        "name": "async tp", "framework": {"name": "torchtitan", "compile": True},
        "model": {"arch": "llama", "layers": 2, "hidden": 1024, "ffn_hidden": 4096, "heads": 8, "vocab": 1000},
        "training": {"seq_len": 2048, "global_batch": 2, "micro_batch": 1, "recompute": "none"},
        "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus_per_node": 4},
        "parallel": {"tp": 4, "sp": True, "overlap_tp": True}})
    lp = layer_passes(sc, 0)
    assert _plan_counts(lp.F) == torch_counts["forward"]
    assert _plan_counts(lp.B + lp.W) == torch_counts["backward"]


@pytest.mark.slow
def test_with_separate_q_k_v_linears_both_dgrad_reduce_scatters_stay_plain():
    """torchtitan at 820504e2 (the published async-TP runs): wq, wk, wv three linears; the framework note says
    so. Under full AC the recompute's gathers fuse with the recomputed GEMMs and no weight gradient re-gathers."""
    counts = _torch_counts("--full-ac")
    assert counts["backward"].get("reduce_scatter") == 2
    assert counts["backward"].get("fused_all_gather") == 4 and "all_gather" not in counts["backward"]
