"""Expert all-to-all volume by dispatcher (plan/ep_dispatch.py): NCCL all-to-all vs DeepEP's
node-deduplicated dispatch, node-limited routing, FP8 dispatch."""
from dataclasses import replace
from pathlib import Path

import pytest

from simulator.errors import ScenarioError
from simulator.model import load_model, model_from_mapping
from simulator.plan.activations import FP8_STORE_BYTES
from simulator.plan.ep_dispatch import ep_message_bytes, nodes_per_token
from simulator.plan.opgraph import shard
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
DSV3 = ROOT / "validation" / "scenarios" / "deepseek_v3.yaml"


def dsv3(*overrides):
    return load_scenario(DSV3, list(overrides))


def test_deepseek_v3_preset_routes_to_4_of_8_groups():
    e = load_model("deepseek-v3").moe
    assert (e.groups, e.top_groups, e.top_k) == (8, 4, 8)


def test_node_limited_routing_reaches_at_most_top_groups_nodes():
    assert nodes_per_token(dsv3()) == 4  # EP64 spans 8 nodes, one group of 32 experts each


def test_without_group_limits_a_token_reaches_the_expected_distinct_nodes():
    sc = dsv3()
    sc = replace(sc, model=replace(sc.model, moe=replace(sc.model.moe, groups=1, top_groups=None)))
    assert nodes_per_token(sc) == pytest.approx(8 * (1 - (1 - 1 / 8) ** 8))  # 5.25 of 8 nodes for top-8


def test_alltoall_sends_a_copy_per_routed_expert():
    sc = dsv3("parallel.ep_dispatcher=alltoall")
    z = shard(sc)
    assert ep_message_bytes(sc, z, z.T, "dispatch") == z.T * 8 * z.h * z.ab
    assert ep_message_bytes(sc, z, z.T, "combine") == z.T * 8 * z.h * z.ab


def test_deepep_sends_once_per_node_dispatching_in_fp8_and_combining_in_bf16():
    sc = dsv3()
    z = shard(sc)
    assert ep_message_bytes(sc, z, z.T, "dispatch") == pytest.approx(z.T * 4 * z.h * FP8_STORE_BYTES)
    assert ep_message_bytes(sc, z, z.T, "combine") == z.T * 4 * z.h * 2
    bf16 = dsv3("training.precision=bf16")
    assert ep_message_bytes(bf16, z, z.T, "dispatch") == z.T * 4 * z.h * 2


def test_deepep_within_one_node_sends_each_token_once():
    sc = dsv3("parallel.ep=8")
    assert nodes_per_token(sc) == 1.0


@pytest.mark.parametrize("moe,where", [({"groups": 3}, "model.moe.groups"), ({"groups": 8, "top_groups": 9}, "model.moe.top_groups")])
def test_bad_routing_groups_are_refused(moe, where):
    raw = {"arch": "llama", "layers": 2, "hidden": 64, "ffn_hidden": 128, "heads": 4, "vocab": 100,
           "moe": {"experts": 16, "top_k": 2, "expert_ffn_hidden": 32, **moe}}
    with pytest.raises(ScenarioError) as e:
        model_from_mapping(raw)
    assert e.value.path == where
