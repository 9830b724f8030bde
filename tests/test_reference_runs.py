"""The published runs of validation/references/*.yaml (papers, public benchmarks, MLPerf): each file's rows build
the layout, model and batches their source states, and their pairs differ only in what the source varied
(`validate --set published` scores them)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
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
