"""Interruptions and the checkpoint interval: sourced failure rates, Young's and Daly's optimum, and the
expected wall-clock time of a run that restarts from its last checkpoint after each interruption.

Model (Daly 2006): interruptions arrive as a Poisson process with mean time between interruptions M for
the whole job; the job computes tau seconds, stalls delta seconds to checkpoint, and after an interruption
spends R seconds (detection + restart + reload + warm-up) before redoing the work since the last
checkpoint. The expected wall time to finish T_s seconds of failure-free compute is

    T_w = M * exp(R / M) * (exp((tau + delta) / M) - 1) * T_s / tau        (Daly 2006)

and goodput = T_s / T_w. Young's first-order optimum tau = sqrt(2 delta M) (Young 1974) and Daly's
higher-order one approximate the tau that minimises T_w; `optimal_interval` finds it
numerically and the tests hold it within 5 % of them.

Sources:
  Young 1974: J. W. Young, "A first order approximation to the optimum checkpoint interval", CACM 17(9).
  Daly 2006: J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps",
             Future Generation Computer Systems 22(3), 303-312.
  Kokolis et al. 2024: "Revisiting Reliability in Large-Scale Machine Learning Research Clusters",
             arXiv 2410.21680 (HPCA 2025), Meta's RSC-1 (16k A100) and RSC-2 (8k A100) research clusters.
  Other published rates, each with its unit, cluster, what it counts and its per-GPU-hour conversion:
             validation/references/reliability/cluster_failure_rates.yaml (read 2026-11-25, re-read 2026-11-26).
"""
from __future__ import annotations

import math

HOUR_S = 3600.0
DAY_S = 86400.0

KOKOLIS_RSC1_FAILURES_PER_NODE_DAY = 6.50e-3
"""RSC-1 (about 2,000 nodes of 8 A100, 16k GPUs, 11 months): r_f = 6.50 job-interrupting failures per
1,000 node-days (Kokolis et al. 2024). What it counts: every job of more than 128 GPUs that ended in
NODE_FAIL, or in FAILED with a critical health check in its last 10 minutes, divided by those jobs'
node-days, so infrastructure faults that end large jobs, not the user's own errors. It gives their projected
MTTF of 1.8 h at 16,384 GPUs (2,048 nodes x 6.50e-3 per day = 13.3 per day). Their measured MTTF of
1,024-GPU jobs, 7.9 h, is shorter than this rate gives for 128 nodes (28.8 h); not resolved here.
Read second-hand: the paper past its abstract is not in the reference stores, so the definition and value
come from a section-by-section walkthrough of it, agreeing reading notes and a verbatim quote of the 6.50
(validation/references/reliability/cluster_failure_rates.yaml, row kokolis-rsc1)."""
KOKOLIS_RSC2_FAILURES_PER_NODE_DAY = 2.34e-3
"""RSC-2 (about 1,000 nodes of 8 A100, 8k GPUs): r_f = 2.34 per 1,000 node-days (Kokolis et al. 2024)."""
KOKOLIS_GPUS_PER_NODE = 8
"""Both RSC clusters have 8 GPUs per node (16k GPUs on RSC-1, 8k on RSC-2)."""

DEFAULT_FAILURES_PER_NODE_DAY = KOKOLIS_RSC1_FAILURES_PER_NODE_DAY
"""Default: RSC-1, the larger cluster and the rate Kokolis et al. project large jobs with. The rule for a
default drawn from several studies (validation/references/reliability/README.md: the median per-GPU-hour rate
of the studies that count unexpected job interruptions on A100-or-newer clusters of >= 1,000 GPUs, one value
per study and cluster) needs three such studies; the transcribed table has two (Kokolis et al.'s RSC-1 and
RSC-2, and Meta's FT-HSDP paper), so the default is unchanged (tests/test_whole_run_reliability_table.py)."""
DEFAULT_FAILURES_PER_GPU_HOUR = DEFAULT_FAILURES_PER_NODE_DAY / (KOKOLIS_GPUS_PER_NODE * 24.0)
"""6.50e-3 / (8 GPUs x 24 h) = 3.39e-5 interruptions per GPU-hour: the per-node rate spread over the
node's GPUs, so that a job's rate scales with its GPU count whatever the node size."""

DETECTION_S = 600.0
"""Time from a fault to the job noticing it: PyTorch's NCCL watchdog timeout, 10 minutes by default
(ProcessGroupNCCL's kProcessGroupNCCLDefaultTimeout). A hang waits for it; a crash is seen sooner, so this
is the conservative end (assumption)."""
RESTART_S = 300.0
"""Rescheduling the job and re-initialising processes and communicators: 5 minutes, the restart overhead
Kokolis et al. 2024 assume in their ETTR model (a stated parameter there, not a measurement)."""
WARMUP_STEPS = 3
"""Steps after a restart that do no useful work: first-iteration compilation, allocator growth, data-loader
start (assumption; no published figure for it)."""


def failures_per_gpu_hour(per_node_day: float, gpus_per_node: int = KOKOLIS_GPUS_PER_NODE) -> float:
    """A cluster study's rate per node-day spread over the node's GPUs: r / (gpus_per_node * 24)."""
    return per_node_day / (gpus_per_node * 24.0)


def mtbi_s(gpus: int, per_gpu_hour: float) -> float:
    """Mean time between interruptions of a job on `gpus` GPUs, seconds: M = 1 / (gpus * rate) (the job
    stops when any of its GPUs or their hosts fails; Kokolis et al. 2024: MTTF = 1 / (N_nodes * r_f))."""
    if gpus <= 0 or per_gpu_hour <= 0:
        return math.inf
    return HOUR_S / (gpus * per_gpu_hour)


def young_interval(delta_s: float, mtbi: float) -> float:
    """Young 1974: tau = sqrt(2 * delta * M), compute seconds between checkpoints."""
    return math.sqrt(2.0 * delta_s * mtbi)


def daly_interval(delta_s: float, mtbi: float) -> float:
    """Daly 2006 (higher-order estimate): tau = sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta for
    delta < 2M, else M."""
    if delta_s >= 2.0 * mtbi:
        return mtbi
    x = delta_s / (2.0 * mtbi)
    return math.sqrt(2.0 * delta_s * mtbi) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


def wall_per_work(tau: float, delta_s: float, restart_s: float, mtbi: float) -> float:
    """T_w / T_s = M exp(R/M) (exp((tau + delta)/M) - 1) / tau (Daly 2006); 1 + delta/tau when no
    interruptions (M infinite)."""
    if math.isinf(mtbi):
        return 1.0 + delta_s / tau
    return mtbi * math.exp(restart_s / mtbi) * math.expm1((tau + delta_s) / mtbi) / tau


def goodput(tau: float, delta_s: float, restart_s: float, mtbi: float) -> float:
    """Share of wall-clock time that trains: T_s / T_w."""
    return 1.0 / wall_per_work(tau, delta_s, restart_s, mtbi)


def optimal_interval(delta_s: float, restart_s: float, mtbi: float, lower_s: float = 0.0) -> float:
    """The tau >= lower_s that minimises `wall_per_work` (golden-section search on log tau; the function
    is unimodal in tau). R only scales T_w by exp(R/M), so the optimum does not depend on it."""
    if math.isinf(mtbi):
        return math.inf
    if delta_s <= 0:
        return max(lower_s, 1e-9)
    f = lambda lt: wall_per_work(math.exp(lt), delta_s, restart_s, mtbi)  # noqa: E731
    lo, hi = math.log(max(lower_s, delta_s * 1e-6, 1e-6)), math.log(100.0 * mtbi + delta_s)
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = f(a), f(b)
    for _ in range(200):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = f(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = f(b)
        if hi - lo < 1e-10:
            break
    return max(math.exp((lo + hi) / 2.0), lower_s)
