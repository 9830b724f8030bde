"""`python -m simulator validate --profile FILE`: the reference runs on the profile's GPU priced from that calibration
profile, the others from the published kernel data; bad input exits 2."""
import subprocess
import sys
from pathlib import Path

from simulator.validate.accuracy import evaluate, load_cases

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "calibrate" / "profiles" / "h200-sxm-measured.json"


def test_runs_on_the_profiles_gpu_are_priced_from_it_and_the_others_are_not():
    cases = [c for c in load_cases(("published",)) if c.id.startswith("torchtitan_llama3_8b_crusoe")]
    h200 = [c for c in cases if "-h200-" in c.id]
    assert h200 and len(cases) > len(h200)
    published = {o.case.id: o for o in evaluate(cases)}
    measured = {o.case.id: o for o in evaluate(cases, profile=(str(H200), "H200 SXM 141GB"))}
    for c in cases:
        on_h200 = c in h200
        assert measured[c.id].predicted["priced_from_profile"] is on_h200
        same = measured[c.id].predicted["tokens_per_s_per_gpu"] == published[c.id].predicted["tokens_per_s_per_gpu"]
        assert same is not on_h200, c.id


def test_a_missing_profile_is_a_one_line_error_and_exit_2():
    proc = subprocess.run([sys.executable, "-m", "simulator", "validate", "--set", "published", "--profile",
                           "no/such.json"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "--profile: no such file no/such.json" in proc.stderr
    assert "Traceback" not in proc.stderr
