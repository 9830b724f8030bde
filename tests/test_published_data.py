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

from simulator.cost.profile_load import load_profile

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
        assert {"source", "url", "release", "accessed", "runs"} <= set(doc) <= {"source", "url", "release", "accessed", "runs", "stack",
                                                                             "cudnn_version", "cudnn_source"}, f.name
        assert ("cudnn_version" in doc) == ("cudnn_source" in doc), f.name  # a release's cuDNN says where it is listed
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
                            "NeMo 25.11 (Megatron-Bridge)": "validation", "NeMo 26.02 (Megatron-Bridge)": "validation",
                            "NeMo 26.04 (Megatron-Bridge)": "validation", "NeMo 26.06 (Megatron-Bridge)": "validation"}
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
    row = {"label": "LLAMA3_8B", "layout": {"system": "DGX-Rubin", "precision": "FP8-CS"}}
    assert skip_reason(row) == "no topology for DGX-Rubin"
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
                         capture_output=True, text=True, cwd=ROOT, timeout=600)  # ~210 s alone on 2 cores; CI shares them with a second worker
    assert out.returncode == 0, out.stderr
    for heading in ("| framework | split | runs | MAPE |", "| framework | feature | value | split |",
                    "| feature | a | b | split | differs |", "Corpus rows not scored", "no clustersim model for GPT OSS 120B"):
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
    """The FP8-MX (25.09, 25.11) and MXFP8 (26.02, 26.04, 26.06) rows on DGX-GB200 / DGX-B200 of a preset's model: each is scored
    with framework.fp8_recipe mxfp8, or skipped with the release's recipe lines (a kept scenario runs mxfp8 too)."""
    from simulator.validate.accuracy import corpus_cases
    from simulator.validate.corpus import PRESET_LABELS
    cases, skipped = corpus_cases()
    scored = {c.id.removeprefix("corpus/") for c in cases}
    reasons = {s["id"]: s["reason"] for s in skipped}
    rows = [(f.stem, r) for f in CORPUS_FILES for r in yaml.safe_load(f.read_text())["runs"]
            if r["layout"]["precision"] in ("FP8-MX", "MXFP8") and r["layout"]["system"] in ("DGX-GB200", "DGX-B200")
            and r["label"] in PRESET_LABELS]
    assert len(rows) == 29
    for stem, r in rows:
        rid = f"{stem}:{r['id']}"
        if "scenario" in r:
            assert r["scenario"]["framework"]["fp8_recipe"] == "mxfp8" and r["scenario"]["training"]["precision"] == "fp8", rid
        reason = reasons.get(rid, "")
        assert rid in scored or ("Megatron-Bridge@" in reason and (".py:" in reason or ".yaml:" in reason)), rid
    assert sum(f"{s}:{r['id']}" in scored for s, r in rows) == 18


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


def test_a_release_s_cudnn_prices_its_rows_unless_a_row_names_its_own(tmp_path):
    """A corpus file's `cudnn_version` (the release container's cuDNN) becomes each scored row's
    `cluster.cudnn_version`; a row that names one keeps it; a file without one leaves the newest published tables."""
    from simulator.validate.corpus import corpus_runs
    row = {"id": "r", "label": "LLAMA3_8B", "where": "w", "measured": {"tokens_per_s_per_gpu": 1, "model_tflops_per_gpu": 1},
           "layout": {"system": "DGX-B200", "precision": "FP8"}, "scenario": {"model": "llama3-8b", "cluster": {"topology": "dgx-b200"}}}
    own = {**row, "id": "s", "scenario": {"model": "llama3-8b", "cluster": {"topology": "dgx-b200", "cudnn_version": "9.13.1"}}}
    doc = {"source": "s", "url": "https://x", "release": "NeMo 25.09 (Megatron-Bridge)", "accessed": "d",
           "cudnn_version": "9.11.0", "cudnn_source": "the release's software versions", "runs": [row, own]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    cases, _ = corpus_runs(tmp_path)
    assert [c["mapping"]["cluster"]["cudnn_version"] for c in cases] == ["9.11.0", "9.13.1"]
    assert "cudnn_version" not in row["scenario"]["cluster"], "the file's row is not changed in place"
    del doc["cudnn_version"], doc["cudnn_source"]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    assert "cudnn_version" not in corpus_runs(tmp_path)[0][0]["mapping"]["cluster"]


def test_the_megatron_bridge_releases_price_the_cudnn_their_containers_ship():
    """NeMo 25.09-26.06 containers' cuDNN (Megatron-Bridge docs/releases/software-versions.md): on the HGX B200,
    whose tables hold 9.10.2 and 9.13.1, 25.09's 9.11.0 prices the 9.10.2 points."""
    from simulator.validate.accuracy import corpus_cases
    want = {"NeMo 25.09 (Megatron-Bridge)": "9.11.0", "NeMo 25.11 (Megatron-Bridge)": "9.13.1",
            "NeMo 26.02 (Megatron-Bridge)": "9.18.0", "NeMo 26.04 (Megatron-Bridge)": "9.20.0",
            "NeMo 26.06 (Megatron-Bridge)": "9.21.1"}
    from simulator.cost.costs import build_cost_model
    from simulator.scenario import scenario_from_mapping
    cases = [c for c in corpus_cases()[0] if c.release in want]
    assert cases and all(c.mapping["cluster"]["cudnn_version"] == want[c.release] for c in cases)
    b200 = next(c for c in cases if c.id.endswith("25_09:llama3-8b-dgx-b200-8gpu-fp8-cs"))
    assert "cuDNN 9.10.2 (cluster.cudnn_version 9.11.0)" in build_cost_model(scenario_from_mapping(b200.mapping)).kernel_source()


def test_h100_rows_run_the_cudnn_tables_of_their_release():
    """On the H100 the cuDNN tables before 9.19.1 are FlashAttention-3's paper's (they name no release) and from it
    cudnn-frontend's H200 run: NeMo 24.07 (9.1.0, assumed) and 26.02 (9.18.0) take the paper's, 26.04 (9.20.0) 9.19.1's."""
    from simulator.cost.costs import build_cost_model
    from simulator.scenario import scenario_from_mapping
    from simulator.validate.accuracy import corpus_cases
    rows = {c.id: c for c in corpus_cases()[0]}
    for cid, text in (("corpus/nemo_24_07_h100:llama3-70b-dgx-h100-64gpu-fp8", "cuDNN older than 9.19.1"),
                      ("corpus/megatron_bridge_26_02:llama3-70b-dgx-h100-64gpu-fp8", "cuDNN older than 9.19.1"),
                      ("corpus/megatron_bridge_26_04:llama3-70b-dgx-h100-64gpu-fp8", "cuDNN 9.19.1 (cluster.cudnn_version 9.20.0)")):
        assert text in build_cost_model(scenario_from_mapping(rows[cid].mapping)).kernel_source(), cid
