"""The Ultra-Scale Playbook's nanotron benchmark runs as clustersim scenarios.

`read_runs` parses `nanotron_ultrascale_runs.csv` (4,104 runs of Llama-style models on 1-64 nodes of
8 x H100, see `validation/data/playbook/README.md`) into `PlaybookRun` rows; `build_scenario` turns one
row into the `Scenario` nanotron actually ran. `validate.py` simulates them and scores the error.

What the runs did, and where each choice below comes from (nanotron branch `nouamane/bench2`, the
playbook's benchmark code, `scaling_benchmarks.py` and `examples/config_tiny_llama_bench.yaml`):
- bf16 weights and activations, gradients accumulated in fp32 (`accumulate_grad_in_fp32: true`) by an
  unfused add after every micro-batch -> `training.grad_dtype: fp32`, `training.grad_accum_fused: false`; AdamW (fused), no activation recomputation, flash attention.
- TP in REDUCE_SCATTER mode (sequence parallel) with `tp_linear_async_communication: true`
  -> `parallel.sp: true`, `parallel.tp_linear_async: true`, `parallel.overlap_tp: false`. nanotron's async
  path (`_ColumnLinearAsyncCommunication`, adapted from Megatron) overlaps what its data dependencies allow:
  in the column linears' backward the input re-gather runs under the dgrad GEMM and the dgrad reduce-scatter
  under the wgrad GEMM; in forward only the local 1/t of the GEMM runs under the all-gather (not modelled),
  and the row linears reduce-scatter synchronously. clustersim's `overlap_tp: true` would hide every TP
  collective: on the fit split (1B/3B/8B, 1,208 timed runs) exposing them was much closer (throughput MAPE
  519 % -> 394 % at the time; `TP_OVERLAP` switches it back). The async column linear hides its two backward
  collectives under its GEMMs (`ops.tp_linear_async`), at the cost of the SMs NCCL takes
  (`NANOTRON_EFFICIENCY["comm_sm_share"]`).
- PP with `OneForwardOneBackwardPipelineEngine` -> `pp_schedule: 1f1b`, its sends blocking (`P2P.send_tensors`
  waits on the metadata sends and the data's isend, `recv_tensors` on the receives, one at a time in
  `PipelineTrainBatchState.run_communication`) -> `pp_p2p: blocking`; nanotron splits the layers by a
  compute-cost threshold that counts the LM head as V*h (`models/base.py: build_model`,
  `LlamaModel.get_block_compute_costs`), so stages are uneven -> explicit `parallel.pp_layers`.
- Rank grid `(pp, dp, tp)` with tp innermost (`ParallelContext`) -> `order: tp-cp-ep-dp-pp`.
- DDP `bucket_cap_mb: 25` of bf16 gradients; the fp32 hook reduces the matching fp32 buffer, i.e. 50 MB
  per collective -> `dp_bucket_mb: 50`, of whole tensors (`dp_bucketing: param`, DDP's rule: the fused
  QKV, gate+up and down projections and the embedding are each above the cap, so each is a bucket alone). ZeRO-0 all-reduces each bucket (`all_reduce_coalesced`), overlapped
  with the last backward -> `overlap_dp: true`. ZeRO-1 reduce-scatters each bucket through
  `reduce_scatter_coalesced`, which flattens one input per DP rank on the compute stream first; the
  fit split says it does not hide behind the backward -> `overlap_dp: false` for ZeRO-1: on otherwise
  identical healthy multi-node twins, ZeRO-1's extra time over ZeRO-0 grows with the micro-batch (the
  longer last backward hides more of ZeRO-0's all-reduce, none of ZeRO-1's): 8B tp8 dp32 +0.10 / 0.11 /
  0.19 / 0.27 s at mbs 1 / 2 / 4 / 8, 3B tp4 dp64 +0.06 / 0.08 / 0.15 s at mbs 1 / 2 / 4. It all-gathers bf16 parameters after the optimizer step, all of
  them in one `all_gather_coalesced` (`optim/zero.py: _all_gather_params`) -> `zero_gather: whole`, into a
  separate buffer -> `zero_gather_inplace: false`. The measured optimizer-phase peak says so: ZeRO-1 runs
  hold 10.9 + 15.1/dp bytes per parameter (1B, tp1, dp 8-256), the states alone 8.7 + 13.0/dp; the
  difference, 2.2 + 2.1/dp, is the bf16 gather buffer and the bf16 cast of the shard (2 + 2/dp).
- Tied embeddings when ffn < 10,000 (the 1B and 3B models) -> `model.tie_embeddings`.
- The network each job had: nanotron measured a 1 GiB all-reduce over one node and over the whole job
  before training (the CSV's busbw columns). The cluster ran in two states (one-node ~458 GB/s and all-job
  ~175-190 GB/s on 8-64 nodes, or ~425 GB/s and ~850/nodes GB/s) and 21 jobs had a node at ~45 GB/s; the
  same 3B tp16 mbs1 layout ran at ~1,100 tokens/s/GPU in the first state and ~165 in the second. So every
  job is priced on `aws-p5` with its NVLink and NIC speeds set to its own measurement (`job_topology`,
  `measured_network.py`); fit split: throughput MAPE 60.0 % -> 52.1 %, median APE 10.9 % -> 10.5 %.
  The all-gather probe pins the per-step latency of the job's rings: ~30-60 us in the healthy state and
  ~180-320 us in the slow one (a latency state, not a bandwidth one: small TP messages slowed the most).
"""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

from ..errors import ScenarioError
from ..frameworks.pp_split import nanotron_pp_layers  # noqa: F401 (re-exported for the tests)
from ..frameworks.resolve import apply_framework
from ..frameworks.spec import load_framework

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CSV = ROOT / "validation" / "data" / "playbook" / "nanotron_ultrascale_runs.csv"
"""Shipped with the repository (provenance in its README); found from this file, so it works from a clone
and from an editable install."""
CSV_ENV = "CLUSTERSIM_PLAYBOOK_CSV"
"""Environment variable that overrides where the CSV is read from."""
TOPOLOGY = "aws-p5"
"""8 x H100 per node, NVLink inside, 32 x 100 Gb/s EFA between nodes (topologies/aws-p5.yaml)."""
FIT_LABELS = ("1B", "3B", "8B")
VALIDATION_LABELS = ("80B", "469G")
"""The data's split (validation/data/playbook/README.md): fit and tune only on 1B/3B/8B; 80B and 469G are reported,
never tuned to."""
TP_OVERLAP = False
"""`parallel.overlap_tp` for the playbook runs (see the module docstring: measured, not configured)."""
NANOTRON_EFFICIENCY = {k: v.value for k, v in load_framework("nanotron").efficiency.items()}
"""nanotron's software stack on these H100s: the `efficiency` of `simulator/frameworks/nanotron.yaml`, which every
`framework: nanotron` scenario gets, fitted on the fit split only. How each value was found:
GEMM 0.55 from one-node tp=1 runs (1.61x over-predicted at 0.78, independent of micro-batch size, so
compute-bound); attention 0.35/0.30: FlashAttention-2 reaches ~35 % of H100 peak (FA3 paper) and nanotron
ran FA2 (at head dim 128; below it `costs.ATTENTION_HEAD_DIM_FACTOR`). TP: 100 us of GPU time per TP collective on top of NCCL's, and 450 us of host time per TP
collective (`CostModel.host_time`: a pass takes max(GPU, host)). The host floor is what the healthy-state
jobs at mbs 1 show: a layer's forward + backward takes 4.3-4.6 ms on one node whatever the model and tp
(1B at tp 2 / 4 / 8: 4.37 / 4.45 / 4.63 ms; 3B tp4 4.31, tp8 4.41; 8B tp8 4.42), 2-8x their compute, while
8B at tp2 (compute ~7 ms) runs above it at 8.96 ms; 10 TP collectives a layer -> ~0.45 ms each. The two
were fitted together on the fit split (grid 0.4-0.5 ms x 75-150 us x GEMM 0.55-0.6, with the
cross-entropy's byte count of `ops.CROSS_ENTROPY_BYTES`): fit throughput MAPE 38.6 -> 37.5 %, median APE
9.8 -> 8.5 %, one-node runs 8.5 / 9.0 / 11.0 -> 5.4 / 6.4 / 6.9 % for 1B / 3B / 8B; before, a flat 150 us
GPU adder priced 1B tp8 mbs1 47 % too fast and 8B tp2-4 10-20 % too slow. A TP collective across nodes
costs more through the network alone: every step of its ring waits ~40 us on EFA
(`fabric.ring_step_latency_us`, solved per job from its all-gather probe; 15 steps over 2 nodes, 31 over
4), which is what the fit split shows: ~0.8 ms per collective over 2 nodes (tp16) and ~1.7-2.2 ms over 4
(tp32) at 16-64 MiB, growing only ~3.7 us per MiB. (A fitted 0.45 ms per extra node did this before; with
the ring latency its best value is 0: fit split TP-across-nodes median APE 12.7 %, 14.1 % with it.) The
slow network state raises the host floor and makes it grow with tp (`SLOW_STATE_TP_HOST`). DP: every
gradient bucket's collective costs 2 ms more than NCCL's (`dp_comm_overhead_s`), and DP rings across nodes
wait 10 us per step (`dp_ring_step_latency_us`), not the ~40 us (healthy) or ~180-320 us (slow) that the
all-gather probe shows and TP rings pay. (1 ms and 5 us until the buckets held whole tensors, as below; refitted
then on the fit split, grid 1-4 ms x 5 / 10 / 20 us: median APE 6.73 -> 6.08 %, MAPE 36.9 -> 35.6 %, and the
pure-DP ZeRO-1 runs' drift with dp gone: 3B on 2-32 nodes fell from 1.00 to 0.76 of measured before, 0.99-1.05 now.) What the fit split says: at pp = 1, tp = 1 on 2-32 nodes the
step beyond compute is ~1.1-1.4 ms per 50 MB of gradients (1B: 108 equal buckets then, 50 whole-tensor ones now; 3B: 286, 86) at dp 32-256 for
ZeRO-0 and ZeRO-1 up to dp 128 (1B ZeRO-1 at dp 256: 2.4 ms), healthy or slow (1B dp64 ZeRO-1 took 0.52 s in both states), where the probe's step latency
priced a ZeRO-1 bucket's reduce-scatter at 2.4 / 5.0 / 10.5 ms (healthy, dp 64 / 128 / 256) and 17 ms
(slow, dp 64): 1B dp256 ZeRO-1 at 3.2x its measured step, ZeRO-0's all-reduce at 0.57x. Fitted with
ZeRO-1's `overlap_dp: false` on the fit split (grid 0 / 0.5 / 1 ms x 5 / 10 / 20 us): throughput MAPE
37.5 -> 35.3 %, median APE 8.5 -> 7.4 %, regret within 2 % of the measured best in 54 -> 83 % of the
groups; the validation split moved 14.7 -> 15.0 % (median 5.7 -> 6.7 %). All-reduces keep the probe's
pricing (the slow state's 64-node ZeRO-0 jobs are as slow as it says). Why the DP rings do not pay the
probe's step latency is not identified. nanotron's async column linears overlap their backward collectives
with their GEMMs inside a node too (`ops.tp_linear_async`); NCCL's kernels then take a share of
the SMs those GEMMs run on: `comm_sm_share` 0.3 (`sm_share.py`; NCCL runs one thread block per
channel, up to 32 of the H100's 132 SMs, and its copies load HBM). What the fit split showed: with the TP
collectives inside a node priced in line, GPU-bound one/two-node tp 2-8 jobs were predicted 10-20 % too slow
(8B tp4 mbs1: 5.9 ms per layer and micro-batch against 5.1 measured), more the bigger the model (healthy
pp = 1 median predicted/measured throughput 1.02 / 0.97 / 0.93 for 1B / 3B / 8B). Hiding them (share 0)
over-corrects the 1B (1.06); a grid over 0 / 0.2 / 0.3 / 0.4 (with the analytic's B + W host floor fixed
to match the engine's fused pass, `analytic.PassTime.host_bound`): fit median APE 7.2 -> 6.5 / 6.4 / 6.4 /
6.4 %, throughput MAPE 35.6 -> 35.8 / 35.6 / 35.6 / 35.5 %, healthy pp = 1 medians 1.05 / 0.99 / 0.97 at
0.3; the fit split's regret within 2 % of the best went 83 -> 79 % of its groups at 0.3 and 0.4. The same
share applies to ZeRO-0's gradient buckets all-reduced under the last backward (NCCL's kernels hold their
SMs whether the data waits on EFA or NVLink): on the fit split's healthy multi-node pp = 1 ZeRO-0 runs the
median predicted/measured throughput grew with the share of the step those buckets overlap (min(DP sync,
last backward) / step under 5 % / 5-15 % / 15-30 % / over 30 %: 1.007 / 1.013 / 1.018 / 1.074, 105 / 42 /
22 / 11 runs), and 1.004 / 1.003 / 0.992 / 0.985 with it. One share for both, grid 0.2 / 0.3 / 0.4: fit
throughput MAPE 35.5 (TP only, 0.3) -> 35.4 / 35.2 / 35.1 %, median APE 6.4 -> 6.4 / 6.3 / 6.3 %, bias
-0.3 -> -0.1 / -0.4 / -1.0 %; kept at 0.3. The slow state's ZeRO-0 runs stay too fast where the overlap is
large (1.14, 13 runs)."""
SLOW_STATE_TP_HOST = {"tp_host_s": 3.0e-4, "tp_host_per_rank_s": 2.5e-4}
"""Host seconds per TP collective (`CostModel.host_time`) for jobs that ran in the cluster's slow network state
(`network_state`; `network: measured` only). In that state a layer's forward + backward never takes less than
~11 / 16 / 25 / 55 ms at tp = 2 / 4 / 8 / 16, whatever the model or micro-batch: 3B tp8 pp2 took 337 ms per
14-layer stage and micro-batch at mbs 1, 2, 4 and 8 alike, and at pp = 1, mbs 1, tp4 jobs on 32 nodes took
15.2 / 15.4 / 16.2 ms per layer and micro-batch for 1B / 3B / 8B and tp8 jobs 26.4 / 25.3 / 26.0 ms, 2-8x
their compute. Healthy-state jobs sit at a lower floor that does not grow with tp (`NANOTRON_EFFICIENCY`:
1B tp8 pp1 mbs1 on 32 nodes, 5.2 ms per layer; the deep healthy pipelines, 1B tp8 pp16 and 3B/8B tp4 pp32,
4.9-5.9 ms, 2.7-5x faster than this floor prices them). It acts
as max(GPU, floor), not a sum (3B tp8 pp2 mbs16 runs at its compute time), as a host that cannot keep
ahead would: priced as 0.3 ms + tp x 0.25 ms of host time per TP collective (10 per layer), fitted on the
fit split (on its multi-node pp > 1 runs, grid over 0-0.8 ms x 0.15-0.3 ms; applied by state, a 2 x 3
grid around it still puts its slow-state runs' median APE lowest there, 8.9 %). It used to apply to
every pipeline across nodes and to nothing else; applied by network state instead, the fit split's
slow-state pp = 1 jobs on several nodes went from a throughput MAPE of 55.6 % (median 17.4 %) to 22.5 %
(12.5 %), its 15 healthy multi-node pipelines from 31.5 % to 19.4 %, the fit split from 41.7 % to 39.3 %
(median 10.1 -> 9.9 %); the validation split did not move (15.2 %). Slow-state jobs on one node get it
too (21 fit runs: 8.8 % with it, 9.7 % without; too few to tell). The cause inside nanotron/NCCL is not identified."""
HEALTHY_NODE_BUSBW = 440.0
"""GB/s: a job whose one-node 1 GiB all-reduce measured at least this ran in the playbook cluster's healthy
network state (~458 GB/s, all-job busbw ~175-190 GB/s on 8-64 nodes); below, the slow state (~425 GB/s,
all-job busbw ~850/nodes GB/s) or a degraded node (~45 GB/s)."""
SLOW_NODE_BUSBW = 200.0
"""GB/s: a one-node probe between this and `HEALTHY_NODE_BUSBW` is the slow state; below, a degraded node."""


def network_state(run: PlaybookRun) -> str:
    """healthy | slow | degraded node | unknown (no probe), from the job's one-node all-reduce busbw."""
    intra = run.busbw.get("all_reduce_intranode8")
    if intra is None:
        return "unknown"
    return "healthy" if intra >= HEALTHY_NODE_BUSBW else ("slow" if intra >= SLOW_NODE_BUSBW else "degraded node")


def zero_twins(runs) -> tuple[list[list[PlaybookRun]], list[list[PlaybookRun]]]:
    """Runs whose layouts differ only in ZeRO-0 vs ZeRO-1, at pp = 1, in groups of >= 2: (on one node, on
    2-64 nodes with every job in the same network state). What the noise floors are measured on
    (`validate.noise_floor`, validation/playbook_regret.py); the caller keeps only timed runs."""
    one_node: dict[tuple, list] = {}
    multi_node: dict[tuple, list] = {}
    for r in runs:
        if r.pp != 1:
            continue
        but_zero = (r.label, r.kv_heads, r.vocab, r.nodes, r.dp, r.tp, r.micro_batch, r.grad_accum)
        if r.nodes == 1:
            one_node.setdefault(but_zero, []).append(r)
        else:
            multi_node.setdefault(but_zero + (network_state(r),), []).append(r)
    return [v for v in one_node.values() if len(v) > 1], [v for v in multi_node.values() if len(v) > 1]


NETWORK = "measured"
"""How `build_scenario` prices a job's network: "measured" (the busbw nanotron measured for that job) or
"spec" (the topology YAML for every job)."""
NETWORK_CHOICES = ("measured", "spec")
DEGRADED_P2P_LATENCY_US = 250e3
"""Microseconds per pipeline send on a job whose one-node all-reduce probe read ~45 GB/s (a node with
NVLink down; `measured_network.DEGRADED_INTRA_FRACTION`), `network: measured` only. The fit split's 20
timed such jobs (all pp > 1, 1-8 nodes, 1B-8B, mbs 1-16) ran 1.2-54x slower than their compute and
collectives explain, by ~1 s per micro-batch at pp >= 4 and ~0.5 s at pp = 2, whatever the model or
micro-batch size: a fixed cost per send, 4 per micro-batch on an interior 1F1B stage and 2 on an end one
(nanotron runs them one at a time, blocking). Fitted on those 20 (grid 230-270 ms): MAPE 6.1 / 3.8 / 2.9 /
3.1 / 4.0 % at 230 / 240 / 250 / 255 / 260 ms; at 250 ms every run is within 0.91-1.04x. The cause inside
NCCL is not known. 28 slow-state jobs of the fit split (and two of the validation split) show the same
~190-290 ms per send with nothing in their probes to flag them (a bad node other than the probed one, we
think): they stay mispriced (`validate.slow_sends` counts them)."""
NANOTRON_DDP_BUCKET_MB = 50.0
"""25 MB of bf16 gradients per DDP bucket (`ddp_bucket_cap_mb: 25`) = 50 MB of the fp32 buffer it reduces."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlaybookRun:
    """One row of the CSV: the layout nanotron ran and what it measured."""
    job_id: str
    run_name: str
    label: str
    """1B | 3B | 8B | 80B | 469G (the playbook's name for the model)."""
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    vocab: int
    tie_embeddings: bool
    seq_len: int
    nodes: int
    gpus_per_node: int
    dp: int
    tp: int
    pp: int
    zero: int
    micro_batch: int
    grad_accum: int
    global_batch: int
    """Sequences per optimizer step (dp * micro_batch * grad_accum)."""
    tp_async: bool
    status: str
    """Success | OOM | Other (crashed or timed out for another reason: no measurement)."""
    after_pp_fix: bool
    """Run with nanotron's later pipeline code; earlier runs are slower with pp > 1."""
    tokens_per_s_per_gpu: Optional[float] = None
    model_tflops_per_gpu: Optional[float] = None
    step_time_s: Optional[float] = None
    mem_allocated_gib: Optional[float] = None
    """torch.cuda.max_memory_allocated of rank 0 (pp rank 0), GiB."""
    mem_reserved_gib: Optional[float] = None
    busbw: dict = field(default_factory=dict)
    """Measured bus bandwidth, GB/s, of 1 GiB fp32 collectives before training: keys
    `{all_reduce,all_gather,reduce_scatter}_{alljob,intranode8}` (nanotron trainer.measure_bandwidth)."""

    @property
    def split(self) -> str:
        return "fit" if self.label in FIT_LABELS else "validation"

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def layout_key(self) -> tuple:
        """Runs with the same key ran the same thing: their spread is the noise floor."""
        return (self.label, self.kv_heads, self.vocab, self.nodes, self.dp, self.tp, self.pp, self.zero,
                self.micro_batch, self.grad_accum, self.after_pp_fix if self.pp > 1 else None)


# ----------------------------------------------------------------------------------- parsing

def _text(value) -> str:
    return "" if value is None else str(value).strip()


def _float(value) -> Optional[float]:
    text = _text(value)
    return float(text) if text else None


def _bool(value) -> bool:
    return _text(value).lower().startswith("true")


def _int(row: dict, key: str, path: str) -> int:
    try:
        return int(float(row[key]))
    except (KeyError, TypeError, ValueError):
        raise ScenarioError(path, f"column {key!r} is {row.get(key)!r}, not an integer")


def run_from_row(row: dict, line: int = 0) -> PlaybookRun:
    path = f"playbook CSV line {line}"
    busbw = {}
    for column, coll in (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter")):
        for scope in ("alljob", "intranode8"):
            v = _float(row.get(f"busbw_{column}_{scope}_GBps"))
            if v is not None:
                busbw[f"{coll}_{scope}"] = v
    status = _text(row.get("status"))
    if status not in ("Success", "OOM", "Other"):
        raise ScenarioError(path, f"status {status!r}", "Success | OOM | Other")
    return PlaybookRun(
        job_id=_text(row.get("job_id")), run_name=_text(row.get("run_name")),
        label=_text(row.get("playbook_label")),
        layers=_int(row, "layers", path), hidden=_int(row, "hidden", path), ffn_hidden=_int(row, "ffn_hidden", path),
        heads=_int(row, "heads", path), kv_heads=_int(row, "kv_heads", path), vocab=_int(row, "vocab", path),
        tie_embeddings=_bool(row.get("tie_word_embeddings", "")), seq_len=_int(row, "seq_len", path),
        nodes=_int(row, "nodes", path), gpus_per_node=_int(row, "gpus_per_node", path),
        dp=_int(row, "dp", path), tp=_int(row, "tp", path), pp=_int(row, "pp", path), zero=_int(row, "zero_stage", path),
        micro_batch=_int(row, "micro_batch", path), grad_accum=_int(row, "grad_accum", path),
        global_batch=_int(row, "global_batch_seqs", path),
        # the benchmark script sets async TP whenever tp_mode is REDUCE_SCATTER (all runs); blank = not logged
        tp_async=_bool(row.get("tp_async_comm", "")) or "REDUCE_SCATTER" in _text(row.get("tp_mode")),
        status=status, after_pp_fix=_bool(row.get("after_pp_fix", "")),
        tokens_per_s_per_gpu=_float(row.get("tokens_per_s_per_gpu", "")),
        model_tflops_per_gpu=_float(row.get("model_tflops_per_gpu", "")),
        step_time_s=_float(row.get("step_time_s_derived", "")),
        mem_allocated_gib=_float(row.get("mem_peak_allocated_gib", "")),
        mem_reserved_gib=_float(row.get("mem_peak_reserved_gib", "")),
        busbw=busbw,
    )


def csv_path(path: str | Path | None = None) -> Path:
    """The CSV to read: `path`, else $CLUSTERSIM_PLAYBOOK_CSV, else the copy in validation/data/playbook/."""
    return Path(path or os.environ.get(CSV_ENV) or DEFAULT_CSV)


def read_runs(path: str | Path | None = None) -> list[PlaybookRun]:
    """All rows, OOM and Other included, in file order."""
    p = csv_path(path)
    try:
        with p.open(newline="") as f:
            reader = csv.DictReader(f)
            return [run_from_row(row, i + 2) for i, row in enumerate(reader)]
    except OSError as e:
        raise ScenarioError("--csv", f"cannot read the playbook CSV {p}: {e.strerror or e}",
                            f"a path to nanotron_ultrascale_runs.csv (or set ${CSV_ENV})")


# ----------------------------------------------------------------------------------- scenario

def scenario_mapping(run: PlaybookRun, topology: str = TOPOLOGY, network: str = NETWORK) -> dict:
    """The scenario (docs/scenario.md keys) nanotron ran for this row: `framework: nanotron` (which brings the
    stack's fitted efficiencies, its DDP buckets, blocking pipeline sends, ZeRO-1's whole gather and
    cost-balanced stages) and what the row states. With `network: measured`, a job outside the healthy
    network state gets the slow state's host floor (`SLOW_STATE_TP_HOST`) on top."""
    efficiency = {}
    if network == "measured" and network_state(run) in ("slow", "degraded node"):
        efficiency.update(SLOW_STATE_TP_HOST)
    pp_layers = None
    if run.pp > 1 and not run.after_pp_fix:  # the code before the PP fix advanced only past a threshold
        pp_layers = nanotron_pp_layers(run.layers, run.hidden, run.ffn_hidden, run.heads, run.vocab, run.pp,
                                       inclusive=False)
    parallel = {
        "dp": run.dp, "tp": run.tp, "pp": run.pp, "cp": 1, "ep": 1, "zero": run.zero,
        "sp": run.tp > 1, "vpp": 1, "overlap_tp": TP_OVERLAP and run.tp_async,
    }
    if pp_layers is not None:
        parallel["pp_layers"] = pp_layers
    return {
        "name": f"playbook {run.run_name} (job {run.job_id})",
        "framework": {"name": "nanotron", "tp_linear_async_communication": run.tp_async, "pp_engine": "1f1b"},
        "model": {
            "arch": "llama", "layers": run.layers, "hidden": run.hidden, "ffn_hidden": run.ffn_hidden,
            "heads": run.heads, "kv_heads": run.kv_heads, "vocab": run.vocab,
            "tie_embeddings": run.tie_embeddings, "name": f"nanotron-llama-{run.label}",
        },
        "training": {
            "seq_len": run.seq_len, "global_batch": run.global_batch, "micro_batch": run.micro_batch,
            "precision": "bf16", "recompute": "none", "attention": "flash", "optimizer": "adamw",
        },
        "cluster": {"topology": topology, "nodes": run.nodes, "gpus_per_node": run.gpus_per_node,
                    "efficiency": efficiency},
        "parallel": parallel,
    }


@lru_cache(maxsize=8)
def _topology(name: str):
    from ..topology import load_topology  # noqa: PLC0415

    return load_topology(name, ROOT)


def job_topology(run: PlaybookRun, topology: str = TOPOLOGY, network: str = NETWORK):
    """The topology this job ran on: the YAML's (`network: spec`), or with its NVLink and EFA speeds set
    to the all-reduce busbw nanotron measured before training (`network: measured`, the default;
    `measured_network.measured_topology`). Jobs without those columns keep the YAML's."""
    t = _topology(topology)
    if network == "spec":
        return t
    from ..cost.measured_network import measured_topology  # noqa: PLC0415

    b = run.busbw
    return measured_topology(t, run.nodes, run.gpus_per_node, _quantized(b.get("all_reduce_intranode8")),
                             _quantized(b.get("all_reduce_alljob")), _quantized(b.get("all_gather_alljob")),
                             DEGRADED_P2P_LATENCY_US)


def _quantized(busbw: Optional[float], step: float = 0.01) -> Optional[float]:
    """busbw on a 1 % log grid: jobs that measured within 1 % of each other share one topology, and so the
    collective caches (4,104 jobs: ~1 min instead of ~4); 1 % is far under the run-to-run spread."""
    if not busbw or busbw <= 0:
        return None
    return round(math.exp(round(math.log(busbw) / step) * step), 3)


def build_scenario(run: PlaybookRun, topology: str = TOPOLOGY, network: str = NETWORK):
    """A validated `Scenario`; raises `ScenarioError` for layouts clustersim cannot express
    (e.g. tp = 256 > 128 heads, which nanotron itself never ran). `network`: see `job_topology`.

    The same steps as `scenario.scenario_from_mapping`, except that the topology YAML is parsed once
    for all 4,104 rows (parsing it dominates otherwise)."""
    from ..model import load_model  # noqa: PLC0415 (keeps CSV parsing import-light)
    from ..scenario import Cluster, Parallel, Scenario, Training, validate_layout  # noqa: PLC0415
    from ..schema import from_mapping  # noqa: PLC0415

    raw, framework = apply_framework(scenario_mapping(run, topology, network))
    sc = Scenario(name=raw["name"], model=load_model(raw["model"], ROOT),
                  training=from_mapping(Training, raw["training"], "training"),
                  cluster=from_mapping(Cluster, raw["cluster"], "cluster"),
                  parallel=from_mapping(Parallel, raw["parallel"], "parallel"),
                  topology=job_topology(run, topology, network), framework=framework)
    return validate_layout(sc)
