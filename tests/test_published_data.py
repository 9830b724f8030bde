"""Published data (issue 38): the transcribed kernel profile loads and every point names its source; the
transcribed performance tables under validation/references/corpus/ parse, have the keys they promise, and
their clustersim readings build; validation/kernel_ceiling.py prints a row per published kernel point."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simulator.cost.profile import load_profile

ROOT = Path(__file__).resolve().parent.parent
PROFILE_DIR = ROOT / "calibrate" / "profiles"
PUBLISHED = sorted(p.stem for p in PROFILE_DIR.glob("*-published.json"))
PROFILE = PROFILE_DIR / "h100-sxm-published.json"
CORPUS = ROOT / "validation" / "references" / "corpus"
CORPUS_FILES = sorted(CORPUS.glob("*.yaml"))
SOURCE_KEYS = {"value", "source", "url", "accessed", "precision", "device", "note"}


def point_keys(profile) -> list[str]:
    """The sidecar's key of every profile point (gemm/<dtype>/<m>x<n>x<k>, attention/<backend>/<dtype>/d<d>/<mask>/<phase>/s<s>)."""
    keys = [f"gemm/{p.dtype}/{p.m}x{p.n}x{p.k}" for p in profile.gemm]
    keys += [f"attention/{p.backend}/{p.dtype}/d{p.d_head}/{'causal' if p.causal else 'full'}/{p.phase}/s{p.s_q}"
             for p in profile.attention]
    return keys


def test_the_h100_and_a100_published_profiles_are_shipped():
    assert {"h100-sxm-published", "a100-sxm-published"} <= set(PUBLISHED)
    assert load_profile(PROFILE).attention


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_profile_loads_and_says_it_was_transcribed(name):
    prof = load_profile(PROFILE_DIR / f"{name}.json")
    assert prof.gemm
    assert "TRANSCRIBED FROM PUBLICATIONS" in prof.provenance.device_name
    assert f"{name}.sources.json" in prof.provenance.command


@pytest.mark.parametrize("name", PUBLISHED)
def test_every_published_point_has_exactly_one_source_and_no_source_is_orphaned(name):
    prof = load_profile(PROFILE_DIR / f"{name}.json")
    keys = point_keys(prof)
    assert len(keys) == len(set(keys)), "two profile points share a key"
    sources = json.loads((PROFILE_DIR / f"{name}.sources.json").read_text())["points"]
    assert set(keys) == set(sources)
    for key, s in sources.items():
        assert set(s) == SOURCE_KEYS, key
        assert all(isinstance(s[k], str) and s[k].strip() for k in SOURCE_KEYS), key
        assert s["url"].startswith("https://"), key


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_values_match_the_profile_points(name):
    """The value the source states (TFLOPS) is the one the point's time was derived from."""
    prof = load_profile(PROFILE_DIR / f"{name}.json")
    sources = json.loads((PROFILE_DIR / f"{name}.sources.json").read_text())["points"]
    for key, p in zip(point_keys(prof), list(prof.gemm) + list(prof.attention)):
        stated = float(sources[key]["value"].split()[0])
        assert p.tflops == stated, key
        if key.startswith("gemm/"):
            flops = 2.0 * p.m * p.n * p.k
        else:
            flops = 4.0 * p.batch_heads * p.s_q * p.s_kv * p.d_head * (0.5 if p.causal else 1.0) * (2.5 if p.phase == "bwd" else 1.0)
        assert flops / p.time_s / 1e12 == pytest.approx(stated, rel=1e-5), key


def test_reference_corpus_files_parse_with_their_required_keys():
    assert CORPUS_FILES
    ids = set()
    for f in CORPUS_FILES:
        doc = yaml.safe_load(f.read_text())
        assert {"source", "url", "release", "accessed", "runs"} <= set(doc) <= {"source", "url", "release", "accessed", "runs", "stack"}, f.name
        assert doc["url"].startswith("https://") and doc["runs"], f.name
        for r in doc["runs"]:
            assert {"id", "label", "where", "measured", "layout"} <= set(r) <= {"id", "label", "where", "measured", "layout", "scenario", "recipe", "skip", "note"}, (f.name, r.get("id"))
            assert f"{f.stem}:{r['id']}" not in ids
            ids.add(f"{f.stem}:{r['id']}")
            m = r["measured"]  # a table that prints no model TFLOP/s has it null, never derived
            assert m["tokens_per_s_per_gpu"] > 0 and (m["model_tflops_per_gpu"] is None or m["model_tflops_per_gpu"] > 0)
            lay = r["layout"]
            assert {"system", "gpus", "precision", "global_batch", "micro_batch", "seq_len", "tp", "pp", "cp"} <= set(lay)
            assert lay["gpus"] % (lay["tp"] * lay["pp"] * lay["cp"]) == 0, (f.name, r["id"])


def test_a_corpus_file_of_another_stack_is_scored_under_that_stack_priced_as_its_framework():
    from simulator.validate.accuracy import corpus_cases
    cases, _ = corpus_cases()
    a100 = [c for c in cases if c.release == "NeMo Megatron 22.08"]
    assert a100 and {c.framework for c in a100} == {"nemo-megatron 22.08 (priced as megatron)"}
    assert all(c.framework == "megatron" for c in cases if c.release.startswith("NeMo 2"))


def test_every_corpus_row_is_scored_or_listed_as_skipped_with_a_reason():
    from simulator.validate.accuracy import corpus_cases
    cases, skipped = corpus_cases()
    rows = sum(len(yaml.safe_load(f.read_text())["runs"]) for f in CORPUS_FILES)
    assert len(cases) + len(skipped) == rows
    assert all(s["reason"] for s in skipped)
    assert {c.set for c in cases} == {"published"}


def test_the_published_set_holds_the_corpus_and_the_papers():
    from simulator.validate.accuracy import load_cases
    ids = {c.id for c in load_cases(("published",))}
    assert any(i.startswith("corpus/") for i in ids) and "megatron_nar21:gpt-1t-3072-a100" in ids


def test_corpus_split_is_by_release_older_fit_newer_validation():
    """The split is fixed by release (never by result) and written down in the README as in the code."""
    from simulator.validate.accuracy import corpus_cases
    from simulator.validate.corpus import CORPUS_SPLIT
    assert CORPUS_SPLIT == {"NeMo Megatron 22.08": "fit", "NeMo 24.07": "fit", "NeMo 25.09 (Megatron-Bridge)": "fit",
                            "NeMo 25.11 (Megatron-Bridge)": "validation", "NeMo 26.02 (Megatron-Bridge)": "validation"}
    readme = (CORPUS / "README.md").read_text()
    for release, split in CORPUS_SPLIT.items():
        assert f"| {release} | {split} |" in readme
    for c in corpus_cases()[0]:
        assert c.split == CORPUS_SPLIT[c.release]
    assert {c.split for c in corpus_cases()[0]} == {"fit", "validation"}


def test_scored_corpus_rows_carry_the_recipe_they_ran_with_its_commit():
    from simulator.validate.accuracy import corpus_cases
    for c in corpus_cases()[0]:
        fw = c.mapping["framework"]
        # NeMo 1.11 (22.08) does not overlap it under PP or SP (its own test below); every other recipe does
        par = c.mapping["parallel"]
        nemo_1_11_pipelined = c.release == "NeMo Megatron 22.08" and (par["pp"] > 1 or par["sp"])
        assert fw["name"] == "megatron" and fw["overlap_grad_reduce"] is (not nemo_1_11_pipelined), c.id
        assert "tp_comm_overlap" in fw, c.id
    for f in CORPUS_FILES:
        for r in yaml.safe_load(f.read_text())["runs"]:
            if "scenario" in r:
                assert "@" in r["recipe"] and (".py:" in r["recipe"] or ".yaml:" in r["recipe"]), r["id"]


def test_the_8b_fp8_cs_recipe_recomputes_five_layers_per_chunk():
    doc = yaml.safe_load((CORPUS / "megatron_bridge_25_11.yaml").read_text())
    run = next(r for r in doc["runs"] if r["id"] == "llama3-8b-dgx-h100-8gpu-fp8-cs")
    assert run["scenario"]["training"]["recompute"] == "full" and run["scenario"]["training"]["recompute_layers"] == 5


def test_skip_reasons_name_what_is_missing():
    from simulator.validate.corpus import skip_reason
    row = {"label": "LLAMA3_8B", "layout": {"system": "DGX-B300", "precision": "FP8-CS"}}
    assert skip_reason(row) == "no topology for DGX-B300"
    assert "FP8-SC" in skip_reason({"label": "LLAMA3_8B", "layout": {"system": "DGX-GB200", "precision": "FP8-SC"}})
    assert "GPT OSS" in skip_reason({"label": "GPT OSS 120B", "layout": {"system": "DGX-H100", "precision": "BF16"}})
    assert "no scenario" in skip_reason({"label": "Qwen3_30B_a3B", "layout": {"system": "DGX-H100", "precision": "FP8"}})


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.stem)
def test_reference_corpus_scenarios_build_with_the_published_layout(path):
    from simulator.scenario import scenario_from_mapping
    doc = yaml.safe_load(path.read_text())
    for r in doc["runs"]:
        if "scenario" not in r:
            continue
        sc = scenario_from_mapping(r["scenario"], base_dir=ROOT)
        lay = r["layout"]
        assert sc.gpus == lay["gpus"], r["id"]
        p = sc.parallel
        assert (p.tp, p.pp, p.cp) == (lay["tp"], lay["pp"], lay["cp"]), r["id"]
        assert (sc.training.global_batch, sc.training.micro_batch, sc.training.seq_len) == \
            (lay["global_batch"], lay["micro_batch"], lay["seq_len"]), r["id"]


def test_kernel_ceiling_prints_one_row_per_published_point():
    from simulator.cost.kernel_data import gpu_points, load_data
    out = subprocess.run([sys.executable, "validation/kernel_ceiling.py", "--json"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert set(rows) == set(load_data()["gpus"])
    for gpu, rs in rows.items():
        pts = gpu_points(gpu)
        assert len(rs) == len(pts["gemm"]) + len(pts["attention"])
        assert all(r["new_ratio"] > 0 and r["old_ratio"] > 0 for r in rs)


def test_kernel_ceiling_unknown_gpu_is_a_clear_error():
    out = subprocess.run([sys.executable, "validation/kernel_ceiling.py", "--gpu", "TPU v9"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and "TPU v9" in out.stderr and "Traceback" not in out.stderr


def _outcome(cid, mapping, measured, predicted, split="validation"):
    from simulator.validate.accuracy import Case, Outcome
    c = Case(set="published", id=cid, label="x", split=split, tokens_per_s_per_gpu=measured, mapping=mapping,
             framework="megatron")
    return Outcome(c, predicted={"tokens_per_s_per_gpu": predicted})


def test_feature_pairs_compare_the_measured_and_predicted_ratio_of_one_feature():
    from simulator.validate.corpus import feature_pairs
    base = {"name": "a", "model": "llama3-8b", "training": {"precision": "bf16", "seq_len": 8192},
            "parallel": {"tp": 1, "cp": 1}}
    fp8 = {**base, "name": "b", "training": {"precision": "fp8", "seq_len": 8192}}
    cp2 = {**base, "name": "c", "parallel": {"tp": 1, "cp": 2}, "training": {"precision": "fp8", "seq_len": 8192}}
    outs = [_outcome("f:a", base, 100.0, 120.0), _outcome("f:b", fp8, 130.0, 180.0), _outcome("f:c", cp2, 90.0, 100.0)]
    pairs = feature_pairs(outs)
    assert [(p["kind"], p["a"], p["b"]) for p in pairs] == [("precision", "f:a", "f:b"), ("cp", "f:b", "f:c")]
    p = pairs[0]
    assert p["measured_ratio"] == pytest.approx(1.3) and p["predicted_ratio"] == pytest.approx(1.5)
    assert p["ratio_error_pct"] == pytest.approx(100 * (1.5 / 1.3 - 1))


def test_identical_runs_of_two_releases_pair_only_across_files():
    from simulator.validate.corpus import feature_pairs
    m = {"name": "x", "model": "llama3-8b", "training": {"precision": "fp8"}}
    same_file = feature_pairs([_outcome("f:a", m, 100.0, 120.0), _outcome("f:b", m, 101.0, 120.0)])
    across = feature_pairs([_outcome("r1:a", m, 100.0, 120.0), _outcome("r2:a", m, 97.0, 120.0)])
    assert same_file == [] and [p["kind"] for p in across] == ["same recipe, another release"]
    assert across[0]["predicted_ratio"] == 1.0 and across[0]["measured_ratio"] == pytest.approx(0.97)


def test_validate_published_prints_per_framework_feature_ratio_and_skipped_tables():
    out = subprocess.run([sys.executable, "-m", "simulator", "validate", "--set", "published", "--markdown"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    for heading in ("| framework | split | runs | MAPE |", "| framework | feature | value | split |",
                    "| feature | a | b | split | differs |", "Corpus rows not scored", "no topology for DGX-B300"):
        assert heading in out.stdout, heading
    assert "| megatron | fit |" in out.stdout and "| megatron | validation |" in out.stdout


def test_framework_table_groups_by_framework_and_split_and_leaves_out_pre_fix_runs():
    from simulator.validate.accuracy import Case, Outcome
    from simulator.validate.corpus import framework_table

    def pb(cid, split, meas, pred, group="main"):
        c = Case(set="playbook", id=cid, label="1B", split=split, group=group, tokens_per_s_per_gpu=meas, framework="nanotron")
        return Outcome(c, predicted={"tokens_per_s_per_gpu": pred})
    outs = [pb("1", "fit", 100.0, 110.0), pb("2", "fit", 100.0, 80.0), pb("3", "fit", 100.0, 500.0, group="pre-pp-fix"),
            _outcome("p:a", {"model": "x"}, 100.0, 150.0)]
    rows = {(r["framework"], r["split"]): r for r in framework_table(outs)}
    assert set(rows) == {("nanotron", "fit"), ("megatron", "validation")}
    assert rows[("nanotron", "fit")]["n"] == 2 and rows[("nanotron", "fit")]["mape_pct"] == pytest.approx(15.0)
    assert rows[("megatron", "validation")]["bias_pct"] == pytest.approx(50.0)


def test_feature_table_reads_features_from_the_built_scenario():
    from simulator.validate.corpus import case_features
    from simulator.scenario import scenario_from_mapping
    doc = yaml.safe_load((CORPUS / "megatron_bridge_25_11.yaml").read_text())
    runs = {r["id"]: r for r in doc["runs"]}
    f70 = case_features(scenario_from_mapping(runs["llama3-70b-dgx-h100-64gpu-fp8-cs"]["scenario"], base_dir=ROOT))
    assert f70 == {"precision": "fp8", "cp": "cp = 1", "schedule": "interleaved-1f1b", "tp_overlap": "on", "recompute": "none",
                   "offload": "none"}
    doc26 = yaml.safe_load((CORPUS / "megatron_bridge_26_02.yaml").read_text())
    row = next(r for r in doc26["runs"] if r["id"] == "llama3-70b-dgx-gb300-64gpu-fp8")
    assert case_features(scenario_from_mapping(row["scenario"], base_dir=ROOT))["offload"] == "activations offloaded"
    f8 = case_features(scenario_from_mapping(runs["llama3-8b-dgx-h100-8gpu-fp8-cs"]["scenario"], base_dir=ROOT))
    assert f8["recompute"] == "full (block)" and f8["tp_overlap"] == "tp = 1" and f8["schedule"] == "no pp"


@pytest.mark.parametrize("preset, total_b, active_b", [("qwen3-30b-a3b", 30.5, 3.3), ("qwen3-235b-a22b", 235.0, 22.0)])
def test_qwen3_moe_presets_have_the_published_parameter_counts(preset, total_b, active_b):
    """Qwen's model cards: 30.5B total / 3.3B activated, 235B / 22B; 128 experts, top-8, no shared expert."""
    from simulator.model import load_model
    from simulator.params import active_params, total_params
    m = load_model(preset)
    assert (m.moe.experts, m.moe.top_k, m.moe.shared_experts, m.head_dim, m.kv_heads, m.vocab) == (128, 8, 0, 128, 4, 151936)
    assert not m.tie_embeddings
    assert total_params(m) / 1e9 == pytest.approx(total_b, rel=0.01)
    assert active_params(m) / 1e9 == pytest.approx(active_b, rel=0.02)


@pytest.mark.parametrize("preset", ["qwen3-30b-a3b", "qwen3-235b-a22b"])
def test_qwen3_presets_say_what_they_leave_out(preset):
    cfg = json.loads((ROOT / "simulator" / "presets" / f"{preset}.json").read_text())
    assert "QK-norm" in cfg["_provenance"] and "not priced" in cfg["_provenance"]
    assert "huggingface.co/Qwen/" in cfg["_provenance"]


def test_every_expressible_moe_row_is_scored_or_skipped_with_what_its_recipe_does():
    """The Qwen3 and DeepSeek-V3 rows on DGX-H100 / DGX-GB200 at an expressible precision: each has a scenario or a
    `skip` naming the recipe's switch clustersim cannot say, with the recipe's commit."""
    from simulator.validate.accuracy import corpus_cases
    from simulator.validate.corpus import EXPRESSIBLE_PRECISIONS
    cases, skipped = corpus_cases()
    scored = {c.id.removeprefix("corpus/") for c in cases}
    reasons = {s["id"]: s["reason"] for s in skipped}
    rows = [f"{f.stem}:{r['id']}" for f in CORPUS_FILES for r in yaml.safe_load(f.read_text())["runs"]
            if r["label"].startswith(("Qwen3", "DeepSeekV3")) and r["layout"]["system"] in ("DGX-H100", "DGX-GB200")
            and r["layout"]["precision"] in EXPRESSIBLE_PRECISIONS]
    assert len(rows) == 20
    for rid in rows:
        reason = reasons.get(rid, "")
        assert rid in scored or ("Megatron-Bridge@" in reason and (".py:" in reason or ".yaml:" in reason)), rid
    assert "megatron_bridge_25_09:qwen3-30b-a3b-dgx-h100-16gpu-fp8" in scored


def test_every_mx_row_on_a_blackwell_topology_runs_mxfp8_or_says_what_its_recipe_does():
    """The FP8-MX (25.09, 25.11) and MXFP8 (26.02) rows on DGX-GB200 / DGX-B200 of a preset's model: each is scored
    with framework.fp8_recipe mxfp8, or skipped with the release's recipe lines (a kept scenario runs mxfp8 too)."""
    from simulator.validate.accuracy import corpus_cases
    from simulator.validate.corpus import PRESET_LABELS
    cases, skipped = corpus_cases()
    scored = {c.id.removeprefix("corpus/") for c in cases}
    reasons = {s["id"]: s["reason"] for s in skipped}
    rows = [(f.stem, r) for f in CORPUS_FILES for r in yaml.safe_load(f.read_text())["runs"]
            if r["layout"]["precision"] in ("FP8-MX", "MXFP8") and r["layout"]["system"] in ("DGX-GB200", "DGX-B200")
            and r["label"] in PRESET_LABELS]
    assert len(rows) == 26
    for stem, r in rows:
        rid = f"{stem}:{r['id']}"
        if "scenario" in r:
            assert r["scenario"]["framework"]["fp8_recipe"] == "mxfp8" and r["scenario"]["training"]["precision"] == "fp8", rid
        reason = reasons.get(rid, "")
        assert rid in scored or ("Megatron-Bridge@" in reason and (".py:" in reason or ".yaml:" in reason)), rid
    assert sum(f"{s}:{r['id']}" in scored for s, r in rows) == 15


def test_the_25_09_blackwell_cells_are_two_runs_and_each_fp8_cs_run_is_scored_or_skipped_by_the_recipe():
    """NeMo 25.09's GB200 / B200 tables print "a (b)" cells: a is FP8-CS, b FP8-MX (the page's footnote). Every printed
    row gives an FP8-CS run and, where it has a parenthesised figure, an FP8-MX run of the same printed row; an FP8-CS
    run is scored, or skipped with the v0.1.0rc4 recipe lines that say why."""
    from simulator.validate.accuracy import corpus_cases
    doc = yaml.safe_load((CORPUS / "megatron_bridge_25_09.yaml").read_text())
    runs = [r for r in doc["runs"] if r["layout"]["system"] in ("DGX-GB200", "DGX-B200")]
    printed = lambda r: r["where"].split("(row as printed: ")[1]  # noqa: E731
    cs = {(r["layout"]["system"], printed(r)): r for r in runs if r["layout"]["precision"] == "FP8-CS"}
    mx = [r for r in runs if r["layout"]["precision"] == "FP8-MX"]
    assert len(cs) + len(mx) == len(runs) == 21
    for r in mx:
        assert (r["layout"]["system"], printed(r)) in cs, r["id"]
        assert f"({r['measured']['tokens_per_s_per_gpu']})" in printed(r), r["id"]
    scored = {c.id.removeprefix("corpus/megatron_bridge_25_09:") for c in corpus_cases()[0]}
    for r in cs.values():
        assert r["id"] in scored or "Megatron-Bridge@6725f7049504c3bcf9a65c5aee40aa118bc7a869" in r["skip"], r["id"]
    assert {r["id"] for r in cs.values()} & scored == {
        "llama3-8b-dgx-gb200-8gpu-fp8-cs", "qwen3-30b-a3b-dgx-gb200-8gpu-fp8-cs", "llama3-8b-dgx-b200-8gpu-fp8-cs",
        "llama31-405b-dgx-b200-128gpu-fp8-cs", "qwen3-30b-a3b-dgx-b200-8gpu-fp8-cs", "qwen3-235b-a22b-dgx-b200-64gpu-fp8-cs",
        "deepseekv3-dgx-gb200-256gpu-fp8-cs", "deepseekv3-dgx-b200-256gpu-fp8-cs",
        "llama3-70b-dgx-gb200-64gpu-fp8-cs", "llama31-405b-dgx-gb200-128gpu-fp8-cs"}  # the last two: CPU offloading


def test_the_qwen3_30b_row_runs_the_recipes_expert_layout():
    from simulator.scenario import scenario_from_mapping
    doc = yaml.safe_load((CORPUS / "megatron_bridge_25_09.yaml").read_text())
    run = next(r for r in doc["runs"] if r["id"] == "qwen3-30b-a3b-dgx-h100-16gpu-fp8")
    sc = scenario_from_mapping(run["scenario"], base_dir=ROOT)
    p = sc.parallel
    assert (p.ep, p.vpp, p.ep_dispatcher, p.ep_imbalance, sc.training.recompute) == (8, 12, "alltoall", 1.0, "none")
    assert sc.model.name == "qwen3-30b-a3b"


def test_a_row_with_a_skip_is_listed_skipped_even_where_it_keeps_its_scenario(tmp_path):
    from simulator.validate.corpus import corpus_runs
    row = {"id": "r", "label": "LLAMA3_8B", "where": "w", "measured": {"tokens_per_s_per_gpu": 1, "model_tflops_per_gpu": 1},
           "layout": {"system": "DGX-H100", "precision": "FP8"}, "scenario": {"model": "llama3-8b"}}
    doc = {"source": "s", "url": "https://x", "release": "NeMo 26.02 (Megatron-Bridge)", "accessed": "d",
           "runs": [row, {**row, "id": "s", "skip": "what the recipe does"}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    cases, skipped = corpus_runs(tmp_path)
    assert [c["id"] for c in cases] == ["corpus/c:r"]
    assert [(s["id"], s["reason"]) for s in skipped] == [("c:s", "what the recipe does")]


def test_the_dropless_qwen3_30b_h100_rows_are_skipped_for_the_host_wait_and_the_token_drop_row_scored():
    """NeMo 25.11 and 26.02 ran Qwen3 30B-A3B on 16 H100 token-dropless (the host waits for the GPU at every MoE
    dispatch), 25.09 with token drop and padding (static shapes, no wait): only 25.09 is scored."""
    from simulator.validate.accuracy import corpus_cases
    cases, skipped = corpus_cases()
    reasons = {s["id"]: s["reason"] for s in skipped}
    assert "corpus/megatron_bridge_25_09:qwen3-30b-a3b-dgx-h100-16gpu-fp8" in {c.id for c in cases}
    for rid, commit in (("megatron_bridge_26_02:qwen3-30b-a3b-dgx-h100-16gpu-fp8", "b0cc2706ddc60d2aefd5fff346445b5c013036a8"),
                        ("megatron_bridge_25_11:qwen3-30b-a3b-dgx-h100-16gpu-fp8-cs", "0d8e0714cd29c01e164fe6de9f532182bdffa942")):
        assert "dropless" in reasons[rid] and "host" in reasons[rid] and f"Megatron-LM@{commit}" in reasons[rid], rid


REFERENCES = ROOT / "validation" / "references"


@pytest.mark.parametrize("name", ["llm_foundry_mpt_h100", "llm_foundry_mpt_fit"])
def test_llm_foundry_mpt_rows_build_the_models_the_table_counts(name):
    """LLM Foundry's table states each row's parameter count (NumParams); the transcribed model (tied embeddings,
    learned positions of the row's sequence length, biased linears, LayerNorm) has exactly that many."""
    from simulator.params import total_params
    from simulator.scenario import scenario_from_mapping
    doc = yaml.safe_load((REFERENCES / f"{name}.yaml").read_text())
    for r in doc["runs"]:
        stated = int(r["where"].split("NumParams ")[1].split(":")[0])
        assert total_params(scenario_from_mapping(r["scenario"], base_dir=ROOT).model) == stated, r["id"]


def test_llm_foundry_fit_rows_are_composers_fit_split_and_repeat_no_validation_cell():
    """llm_foundry_mpt_fit.yaml holds other cells of the same README tables: every row is split fit and priced as
    composer, and none is a README line or a layout the validation file already holds."""
    from simulator.validate.corpus import _flat
    fit = yaml.safe_load((REFERENCES / "llm_foundry_mpt_fit.yaml").read_text())["runs"]
    val = yaml.safe_load((REFERENCES / "llm_foundry_mpt_h100.yaml").read_text())["runs"]
    assert fit and all(r["split"] == "fit" and r["scenario"]["framework"]["name"] == "composer" for r in fit)
    assert all(r.get("split", "validation") == "validation" for r in val)
    line = lambda r: r["where"].split(" (")[0]  # noqa: E731 ("README.md line N")
    assert not {line(r) for r in fit} & {line(r) for r in val}
    assert len({line(r) for r in fit}) == len(fit)
    flat = lambda r: tuple(sorted((k, str(v)) for k, v in _flat(r["scenario"]).items() if k != "name"))  # noqa: E731
    assert not {flat(r) for r in fit} & {flat(r) for r in val}


def test_llm_foundry_bf16_and_fp8_rows_pair_on_precision_only():
    from simulator.validate.corpus import _flat, _pair_kind
    doc = yaml.safe_load((REFERENCES / "llm_foundry_mpt_h100.yaml").read_text())
    runs = {r["id"]: r["scenario"] for r in doc["runs"]}
    bf16 = sorted(i for i in runs if i.endswith("-bf16"))
    assert len(bf16) == 5
    for i in bf16:
        assert _pair_kind(_flat(runs[i]), _flat(runs[i.replace("-bf16", "-fp8")]), True) == "precision", i


def test_a_cp_pair_may_set_the_cp_attention_exchange_on_its_cp_side_only():
    """Llama 3's 128K row (CP16, all-gather attention) against its 8K row on the same 16,384 GPUs is one CP pair:
    cp_comm means nothing at cp = 1, so naming it on the CP side alone does not unpair them."""
    from simulator.validate.corpus import _flat, _pair_kind
    doc = yaml.safe_load((REFERENCES / "llama3_405b.yaml").read_text())
    runs = {r["id"]: _flat(r["scenario"]) for r in doc["runs"]}
    assert _pair_kind(runs["405b-16k-gpus-dp128"], runs["405b-16k-gpus-cp16-128k"], True) == "cp"
    assert _pair_kind({"parallel.cp": 1, "parallel.tp": 2}, {"parallel.cp": 2, "parallel.tp": 4}, True) is None


def test_bloom_row_builds_the_published_176b_model_and_the_stated_pipeline_split():
    """BLOOM's 176,247M parameters (arXiv 2211.05100 Table 3); the slurm script's 70 layers over PP 12 with the
    embedding counted as one block on the first and last stages (72 / 12 = 6 per stage)."""
    from simulator.params import total_params
    from simulator.scenario import scenario_from_mapping
    (run,) = yaml.safe_load((REFERENCES / "bloom_176b.yaml").read_text())["runs"]
    sc = scenario_from_mapping(run["scenario"], base_dir=ROOT)
    assert round(total_params(sc.model) / 1e6) == 176_247
    assert sc.parallel.pp_layers == [5] + [6] * 10 + [5] and sum(sc.parallel.pp_layers) == sc.model.layers
    assert (sc.parallel.tp, sc.parallel.pp, sc.parallel.dp) == (4, 12, 8)
    assert run["measured"]["tokens_per_s_per_gpu"] == pytest.approx(19.561 * 2048 / 384, abs=0.01)


@pytest.mark.parametrize("name", ["torchtitan_llama3_8b_sagemaker", "torchtitan_llama3_8b_awsome"])
def test_torchtitan_llama3_8b_rows_run_the_presets_layout_on_32_gpus(name):
    """torchtitan's llama3_8b.toml (2024-10 and 2025-03): batch_size 1 per GPU, seq_len 8192, FSDP2 over all 32
    GPUs of 4 p5.48xlarge, op-level SAC; one micro-batch per step."""
    from simulator.scenario import scenario_from_mapping
    for r in yaml.safe_load((REFERENCES / f"{name}.yaml").read_text())["runs"]:
        sc = scenario_from_mapping(r["scenario"], base_dir=ROOT)
        p, t = sc.parallel, sc.training
        assert (p.dp, p.tp, p.pp, p.cp, p.zero) == (32, 1, 1, 1, 3) and sc.cluster.nodes * 8 == 32, r["id"]
        assert (t.seq_len, t.global_batch, t.micro_batch, t.recompute) == (8192, 32, 1, "selective"), r["id"]
        assert sc.model.name == "llama3-8b" and sc.framework.name == "torchtitan", r["id"]


def test_torchtitan_compile_and_fp8_rows_pair_on_precision_and_the_two_defaults_as_one_recipe():
    from simulator.validate.corpus import _flat, _pair_kind
    a = {r["id"]: _flat(r["scenario"]) for r in yaml.safe_load((REFERENCES / "torchtitan_llama3_8b_sagemaker.yaml").read_text())["runs"]}
    (b,) = [_flat(r["scenario"]) for r in yaml.safe_load((REFERENCES / "torchtitan_llama3_8b_awsome.yaml").read_text())["runs"]]
    assert _pair_kind(a["llama3-8b-32-h100-compile-2024"], a["llama3-8b-32-h100-compile-fp8-2024"], True) == "precision"
    assert _pair_kind(a["llama3-8b-32-h100-default-2024"], b, False) == "same recipe, another release"


def test_torchtitan_default_and_compiled_rows_pair_on_compile():
    from simulator.validate.corpus import _flat, _pair_kind
    a = {r["id"]: _flat(r["scenario"]) for r in yaml.safe_load((REFERENCES / "torchtitan_llama3_8b_sagemaker.yaml").read_text())["runs"]}
    assert _pair_kind(a["llama3-8b-32-h100-default-2024"], a["llama3-8b-32-h100-compile-2024"], True) == "compile"


def test_crusoe_torchtitan_rows_run_fsdp2_over_every_gpu_with_the_tables_local_batch():
    """Crusoe's table (crusoecloud/torchtitan README): each row's GPU count and per-GPU batch size are the scenario's,
    FSDP2 over all GPUs, one micro-batch per step, op-level SAC (what the logged memory allows, see the header)."""
    from simulator.scenario import scenario_from_mapping
    runs = yaml.safe_load((REFERENCES / "torchtitan_llama3_8b_crusoe.yaml").read_text())["runs"]
    assert len(runs) == 11
    for r in runs:
        sc = scenario_from_mapping(r["scenario"], base_dir=ROOT)
        gpus = int(r["where"].split(" (")[1].split(" GPU)")[0])
        batch = int(r["where"].split("batch ")[1].split(":")[0])
        p, t = sc.parallel, sc.training
        assert sc.gpus == gpus and (p.dp, p.tp, p.pp, p.cp, p.zero) == (gpus, 1, 1, 1, 3), r["id"]
        assert (t.micro_batch, t.global_batch, t.seq_len, t.recompute) == (batch, batch * gpus, 8192, "selective"), r["id"]
        assert sc.model.name == "llama3-8b" and sc.framework.name == "torchtitan" and dict(sc.framework.options)["compile"] is False, r["id"]


def test_torchao_readme_row_runs_the_benchmark_scripts_layout():
    """torchao's float8 README rows: 8 H100, batch 1, seq 8192, torch.compile, FSDP2, per-op SAC; bf16, then
    tensorwise float8 with the script's FP8 all-gather settings, then rowwise float8 (bf16 all-gather)."""
    from simulator.scenario import scenario_from_mapping
    bf16, fp8, rowwise = yaml.safe_load((REFERENCES / "torchtitan_llama3_8b_torchao.yaml").read_text())["runs"]
    for r, precision in ((bf16, "bf16"), (fp8, "fp8"), (rowwise, "fp8")):
        sc = scenario_from_mapping(r["scenario"], base_dir=ROOT)
        p, t = sc.parallel, sc.training
        assert sc.gpus == 8 and (p.dp, p.zero) == (8, 3) and (t.micro_batch, t.global_batch, t.seq_len) == (1, 8, 8192)
        assert t.recompute == "selective" and t.precision == precision and dict(sc.framework.options)["compile"] is True
        # the benchmark PR's torchtitan log: 47.79 GiB is 50.30 % of the device, Meta's 96 GB HBM2e H100 at 500 W
        assert sc.topology.name == "grand-teton-h100" and 47.79 / sc.topology.gpu.memory_gib == pytest.approx(0.5030, abs=1e-4)
        assert sc.topology.gpu.power_limit_w == 500
    options = dict(scenario_from_mapping(fp8["scenario"], base_dir=ROOT).framework.options)
    assert options["float8_fsdp_all_gather"] is True and options["float8_precompute_scale"] is True
    options = dict(scenario_from_mapping(rowwise["scenario"], base_dir=ROOT).framework.options)
    assert options["float8_recipe"] == "rowwise" and options["float8_fsdp_all_gather"] is False


def test_async_tp_rows_pair_vanilla_and_async_tp_on_tp_overlap_alone():
    """torchtitan's async TP benchmark (2025-06): at each layout the vanilla and async TP rows differ only in
    parallel.overlap_tp (what the framework's async_tp sets), FSDP over the DP ranks and TP 8 inside a node."""
    from simulator.scenario import scenario_from_mapping
    from simulator.validate.corpus import _flat, _pair_kind
    runs = {r["id"]: r["scenario"] for r in yaml.safe_load((REFERENCES / "torchtitan_llama3_async_tp.yaml").read_text())["runs"]}
    for base, dp, batch in (("llama3-70b-256-h100-tp8-bf16", 32, 16), ("llama3-8b-64-h100-tp8-bf16", 8, 12)):
        assert _pair_kind(_flat(runs[base]), _flat(runs[base + "-async-tp"]), True) == "tp_overlap"
        for rid in (base, base + "-async-tp"):
            sc = scenario_from_mapping(runs[rid], base_dir=ROOT)
            p, t = sc.parallel, sc.training
            assert (p.dp, p.tp, p.zero, sc.gpus) == (dp, 8, 3, dp * 8), rid
            assert (t.micro_batch, t.global_batch, t.seq_len) == (batch, batch * dp, 8192), rid
            assert p.overlap_tp is rid.endswith("async-tp"), rid


def test_the_nemo_22_08_a100_rows_are_fit_rows_run_as_the_recipe_at_the_table_commit():
    """NeMo Megatron 22.08's DGX A100 tables (the A100's only fit data): every row scored in the fit split, per-GPU
    throughput = the printed job figure / GPUs, model TFLOP/s null (not printed), 5B TP1 PP1 without recomputation and
    175B TP8 PP8 with selective recomputation and SP, no FlashAttention, MBS 2 and GBS 2048 at every node count."""
    from simulator.scenario import scenario_from_mapping
    from simulator.validate.accuracy import corpus_cases
    cases = [c for c in corpus_cases()[0] if c.id.startswith("corpus/nemo_launcher_22_08_a100:")]
    assert len(cases) == 11 and {c.split for c in cases} == {"fit"}
    printed = {"gpt3-5b-dgx-a100-8gpu-bf16": 40345, "gpt3-175b-dgx-a100-1024gpu-bf16": 109684}
    for c in cases:
        sc = scenario_from_mapping(c.mapping, base_dir=ROOT)
        p, t = sc.parallel, sc.training
        assert sc.topology.gpu.name == "A100 SXM4 80GB" and c.model_tflops_per_gpu is None, c.id
        assert (t.micro_batch, t.global_batch, t.precision, t.attention) == (2, 2048, "bf16", "eager"), c.id
        big = "175b" in c.id
        assert (p.tp, p.pp, p.sp, t.recompute) == ((8, 8, True, "selective") if big else (1, 1, False, "none")), c.id
        rid = c.id.split(":")[1]
        if rid in printed:
            assert c.tokens_per_s_per_gpu * sc.gpus == printed[rid]



def test_one_benchmarks_sdpa_back_ends_pair_as_attention_kernel_and_releases_only_across_files():
    """NVIDIA's Llama 3.2 1B benchmark times each shape with cuDNN and FlashAttention-2 through SDPA: within one file
    the two rows pair as 'attention kernel'; the same difference across two files stays 'same recipe, another
    release' (torchtitan's SDPA back end changed between releases)."""
    from simulator.validate.corpus import _flat, _pair_kind
    runs = {r["id"]: _flat(r["scenario"]) for r in yaml.safe_load((REFERENCES / "hf_llama32_1b_b200.yaml").read_text())["runs"]}
    assert len(runs) == 12
    for shape in ("bs24-sl768", "bs1-sl16384"):
        a, b = runs[f"llama32-1b-1-b200-{shape}-cudnn"], runs[f"llama32-1b-1-b200-{shape}-flash"]
        assert _pair_kind(a, b, True) == "attention kernel"
        assert _pair_kind(a, b, False) == "same recipe, another release"


def test_torchtitan_b200_sdpa_pair_differs_in_the_attention_backend_alone():
    """torchtitan #1196's before / after log lines: the llama3_8b preset at the merge commit (batch 1, seq 8192, op
    SAC, FSDP2, bf16, no compile) on a B200 node, FlashAttention-2 then cuDNN, whose output op SAC did not save then."""
    from simulator.scenario import scenario_from_mapping
    flash, cudnn = yaml.safe_load((REFERENCES / "torchtitan_llama3_8b_b200_sdpa.yaml").read_text())["runs"]
    scs = [scenario_from_mapping(r["scenario"], base_dir=ROOT) for r in (flash, cudnn)]
    for sc in scs:
        p, t = sc.parallel, sc.training
        assert sc.gpus == 8 and (p.dp, p.zero) == (8, 3) and (t.micro_batch, t.global_batch, t.seq_len) == (1, 8, 8192)
        assert t.recompute == "selective" and t.precision == "bf16" and dict(sc.framework.options)["compile"] is False
        assert dict(sc.framework.options)["op_sac_saves_cudnn"] is False and sc.topology.name == "dgx-b200"
    assert [sc.framework.attention_kernel for sc in scs] == ["flash2", "cudnn"]
    assert flash["scenario"] | {"framework": None, "name": None} == cudnn["scenario"] | {"framework": None, "name": None}


@pytest.mark.parametrize("topology, logged", [
    ("dgx-b200", [(46.39, 0.2601), (44.59, 0.2500), (165.16, 0.9260), (161.51, 0.9056)]),  # torchtitan#1196; Crusoe
    ("gb200-nvl72", [(158.61, 0.8620), (159.31, 0.8658), (161.65, 0.8785)]),                  # Crusoe's GB200 rows
])
def test_blackwell_memory_is_torchs_total_as_torchtitan_logs_print_it(topology, logged):
    """torchtitan prints peak reserved GiB with its share of torch's total device memory: each logged pair divides
    to the topology's memory_gib within the log's rounding."""
    from simulator.topology import load_topology
    cap = load_topology(topology).gpu.memory_gib
    for gib, share in logged:
        assert gib / share == pytest.approx(cap, abs=0.02), (gib, share)


def test_mlperf_v3_1_gpt3_rows_run_the_submissions_layout_and_their_logged_batches():
    """NVIDIA's MLPerf Training v3.1 GPT-3 175B: TP4 PP8 VP12, MBS 1, FP8, SP, userbuffers TP overlap, distributed
    optimizer with bf16 gradient sync; each row's micro-batches per pipeline are its logs' gradient_accumulation_steps
    (128 on 64 and 96 nodes, 16 on 512-1,024, 8 on 1,280 and 1,344) and its tokens per step the logged batch x 2,048."""
    from simulator.scenario import scenario_from_mapping
    runs = yaml.safe_load((REFERENCES / "mlperf_training_v3_1_gpt3.yaml").read_text())["runs"]
    ga = {512: 128, 768: 128, 4096: 16, 6144: 16, 8192: 16, 10240: 8, 10752: 8}
    assert sorted(ga) == sorted(int(r["id"].split("-")[2]) for r in runs)
    for r in runs:
        sc = scenario_from_mapping(r["scenario"], base_dir=ROOT)
        p, t = sc.parallel, sc.training
        assert (p.tp, p.pp, p.vpp, p.zero, p.sp, p.pp_schedule) == (4, 8, 12, 1, True, "interleaved-1f1b")
        assert (t.micro_batch, t.seq_len, t.precision, t.recompute, t.grad_dtype) == (1, 2048, "fp8", "none", "bf16")
        assert sc.micro_batches == ga[sc.gpus] and sc.overlap_tp and sc.model.name == "gpt3-175b"
        m = r["measured"]
        assert m["tokens_per_s_per_gpu"] == pytest.approx(t.global_batch * 2048 / m["step_time_s"] / sc.gpus, rel=1e-3)


def test_mlperf_v4_0_gpt3_rows_run_the_submissions_layouts():
    """NVIDIA's MLPerf Training v4.0 GPT-3 175B: 64 nodes TP4 PP8 VP4 MBS 2 (72 micro-batches, as logged); 1,344 and
    1,452 nodes TP4 PP6 VP8 MBS 1 (6 micro-batches); FP8 parameters, userbuffers, distributed optimizer, bf16 grad sync."""
    from simulator.scenario import scenario_from_mapping
    runs = yaml.safe_load((REFERENCES / "mlperf_training_v4_0_gpt3.yaml").read_text())["runs"]
    want = {512: (8, 4, 2, 72), 10752: (6, 8, 1, 6), 11616: (6, 8, 1, 6)}
    for r in runs:
        sc = scenario_from_mapping(r["scenario"], base_dir=ROOT)
        p, t = sc.parallel, sc.training
        assert (p.pp, p.vpp, t.micro_batch, sc.micro_batches) == want[sc.gpus] and p.tp == 4 and sc.overlap_tp
        assert t.precision == "fp8" and dict(sc.framework.options)["fp8_param_gather"] is True and t.grad_dtype == "bf16"
    assert sorted(want) == sorted(scenario_from_mapping(r["scenario"], base_dir=ROOT).gpus for r in runs)


def test_mlperf_v4_1_gpt3_rows_run_the_submissions_layouts():
    """NVIDIA's MLPerf Training v4.1 GPT-3 175B: TP4 PP8 VP6 MBS 2 with the logged 128 / 64 micro-batches on 256 / 512
    H100 (NeMo 24.09) and 512 on 64 preview B200; FP8 parameters, userbuffers, distributed optimizer, bf16 grad sync.
    The 11,616-GPU logs of that submission are v4.0's and are not repeated."""
    from simulator.scenario import scenario_from_mapping
    runs = yaml.safe_load((REFERENCES / "mlperf_training_v4_1_gpt3.yaml").read_text())["runs"]
    want = {("dgx-h100", 256): (128, 125), ("dgx-h100", 512): (64, 200), ("dgx-b200", 64): (512, 200)}
    for r in runs:
        sc = scenario_from_mapping(r["scenario"], base_dir=ROOT)
        p, t = sc.parallel, sc.training
        assert (p.tp, p.pp, p.vpp, t.micro_batch, t.global_batch) == (4, 8, 6, 2, 2048) and sc.overlap_tp
        assert (sc.micro_batches, p.dp_bucket_mb) == want[(sc.topology.name, sc.gpus)]
        assert t.precision == "fp8" and dict(sc.framework.options)["fp8_param_gather"] is True and t.grad_dtype == "bf16"
    assert len(runs) == len(want)


def test_mlperf_v5_0_llama31_405b_rows_run_the_submissions_layouts():
    """NVIDIA's MLPerf Training v5.0 Llama 3.1 405B: H100 TP8, GB200 TP4, both PP8 VP8 CP2 MBS 1, the embedding and the
    loss counted in the pipeline split ([1, 2 x 62, 1] layers over 64 chunks); micro-batches per pipeline as logged."""
    from simulator.scenario import scenario_from_mapping
    runs = yaml.safe_load((REFERENCES / "mlperf_training_v5_0_llama31_405b.yaml").read_text())["runs"]
    ga = {("H100", 512): 288, ("H100", 2048): 72, ("H100", 2432): 64, ("H100", 2560): 56, ("H100", 8192): 24,
          ("GB200", 256): 112, ("GB200", 512): 112}
    for r in runs:
        sc = scenario_from_mapping(r["scenario"], base_dir=ROOT)
        p, gpu = sc.parallel, ("GB200" if "gb200" in r["id"] else "H100")
        assert (p.tp, p.pp, p.vpp, p.cp) == ((4 if gpu == "GB200" else 8), 8, 8, 2) and sc.micro_batches == ga[(gpu, sc.gpus)]
        assert list(p.pp_layers) == [1] + [2] * 62 + [1] and sc.training.precision == "fp8" and sc.overlap_tp
    assert len(runs) == len(ga)
