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
        assert set(doc) == {"source", "url", "release", "accessed", "runs"}, f.name
        assert doc["url"].startswith("https://") and doc["runs"], f.name
        for r in doc["runs"]:
            assert {"id", "label", "where", "measured", "layout"} <= set(r) <= {"id", "label", "where", "measured", "layout", "scenario", "note"}, (f.name, r.get("id"))
            assert f"{f.stem}:{r['id']}" not in ids
            ids.add(f"{f.stem}:{r['id']}")
            assert r["measured"]["tokens_per_s_per_gpu"] > 0 and r["measured"]["model_tflops_per_gpu"] > 0
            lay = r["layout"]
            assert {"system", "gpus", "precision", "global_batch", "micro_batch", "seq_len", "tp", "pp", "cp"} <= set(lay)
            assert lay["gpus"] % (lay["tp"] * lay["pp"] * lay["cp"]) == 0, (f.name, r["id"])


def test_reference_corpus_stays_out_of_the_published_validation_set():
    """The corpus is data for issue 38's fit/validation split; `validate --set published` reads only
    validation/references/*.yaml, so nothing shipped changes until the lead wires it in."""
    from simulator.validate.accuracy import reference_cases
    assert not any(c.source.startswith(("NVIDIA NeMo", "NVIDIA Megatron-Bridge")) for c in reference_cases())


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
