"""Scenario files (docs/scenario.md): YAML read with safe_load, `--set dotted.key=value` overrides, strict
validation of every key and of the layout as a whole. The result is a frozen `Scenario` with the model
and topology resolved; everything downstream takes it as plain data.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from .cudnn_spec import release as cudnn_release
from .errors import ScenarioError
from .overrides import apply_overrides, override_keys  # noqa: F401 (apply_overrides: the sweep's import)
from .frameworks.resolve import FrameworkChoice, apply_framework, drop_options_setting, hardware_rules, layout_rules
from .inputs import existing_file, read_yaml_file, short
from .model import MAX_LAYERS, ModelSpec, load_model, without_config_mtp
from .diloco_spec import DiLoCo
from .stragglers import SlowGpus, Straggler, check_stragglers
from .cluster_mix import DegradedLink, Pool, check_cluster_mix, resolve_pools
from .document_spec import Documents, resolve_documents
from .efficiency_spec import check_efficiency
from .ep_spec import check_expert_parallel
from .offload_spec import check_offload
from .pipeline_spec import check_pipeline
from .plan.schedules import DEFAULT_SCHEDULE, NOT_MODELLED, SCHEDULES, schedule_alias
from .schema import from_mapping
from .topology import Topology, load_topology
from .run_spec import RunSpec, parse_run

DIMS = ("tp", "cp", "ep", "dp", "pp")

# Upper bounds (each far above real use, low enough that one simulation stays seconds and megabytes):
MAX_GPUS = 1 << 20
"""GPUs in a cluster: 1,048,576, ~10x the largest training clusters (100-200 K GPUs); the 70B on 2**20
GPUs simulates in 1.5 s / 94 MB, while 10**7 nodes took gigabytes."""
MAX_SEQ_LEN = 1 << 24
"""Tokens per sequence: 16 M, 16x the 1 M-token contexts trained with context parallelism."""
MAX_GLOBAL_BATCH = 1 << 30
"""Sequences per step: ~10**9 (published batches are thousands of sequences); above it token counts
stop being exact in float arithmetic."""
MAX_MICRO_BATCHES = 1 << 14
"""Micro-batches per pipeline per step: both estimators walk every one. The 70B at PP8 with 16,384 took
2.6 s (analytic) on the 2-core host, the engine ~1 ms each; 2**21 exhausted 5 GB."""
MAX_DP_BUCKETS = 1 << 15
"""Gradient buckets per rank with dp_bucketing even (params x 4 B / (tp x pp) / dp_bucket_mb): the estimators
time each one; the 70B at 0.01 MB (440 K buckets) took 2.7 GB and 100 s, at 1 MB (4.4 K) 5.5 s."""
MAX_EP_IMBALANCE = 1024.0
"""parallel.ep_imbalance: the busiest of ep ranks holds at most ep x the mean (validate_layout checks that
too); EP groups of more than 1,024 ranks are not in use."""
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp")
"""The Megatron-Core `recompute_modules` the simulator prices (`training.recompute_modules`)."""
MAX_LAYERS_RECOMPUTED = 1 << 16
"""training.recompute_layers: more than any model's layers per chunk (the count is capped by the chunk's own)."""


@dataclass(frozen=True, kw_only=True)
class Training:
    seq_len: int = field(metadata={"min": 1, "max": MAX_SEQ_LEN})
    """Tokens per sequence, at most MAX_SEQ_LEN."""
    global_batch: int = field(metadata={"min": 1, "max": MAX_GLOBAL_BATCH})
    """Sequences per optimizer step, all DP replicas together (at most MAX_GLOBAL_BATCH)."""
    micro_batch: int = field(default=1, metadata={"min": 1, "max": MAX_GLOBAL_BATCH})
    """Sequences per micro-batch on one DP rank."""
    precision: str = field(default="bf16", metadata={"choices": ("fp32", "bf16", "fp16", "fp8", "fp4")})
    """bf16/fp16/fp8/fp4: fp32 master weights and optimizer states; fp16 is bf16 plus a loss scaler's unscale pass
    (`step_ops.LOSS_SCALE_BYTES`); fp8, fp4 (NVFP4: E2M1, E4M3 scales per 16 values; Blackwell) quantize the layers' linears."""
    recompute: str = field(default="none", metadata={"choices": ("none", "selective", "full")})
    """Recomputation: none; selective (core attention re-run in the backward); full (only each layer's input kept)."""
    recompute_modules: Optional[list[str]] = None
    """With recompute selective: the parts each layer re-runs in its backward instead of storing their outputs, Megatron-Core's
    `recompute_modules`: core_attn (the core attention), layernorm (the two pre-norms' outputs), mla_up_proj (MLA's q/k/v
    up-projections and RoPE, from the stored latents), moe_act (the experts' SwiGLU output, from its stored input), mlp
    (a dense layer's whole MLP, its TP collectives included, from its stored input; not an MoE layer's). Null:
    [core_attn], Megatron's default. DeepSeek-V3 (report §3.2.3): [layernorm, mla_up_proj]."""
    activation_func_fp8_input_store: bool = False
    """The SwiGLU inputs (gate and up) are stored in FP8 for the backward (Megatron-Core's
    `activation_func_fp8_input_store`; DeepSeek-V3 report §3.3.4, "Inputs of the SwiGLU operator in MoE")."""
    recompute_layers: Optional[int] = field(default=None, metadata={"min": 0, "max": MAX_LAYERS_RECOMPUTED})
    """With recompute full: only the first N layers of each model chunk (pipeline stage, or virtual stage with vpp > 1) are
    recomputed, the others store all (Megatron's --recompute-method block --recompute-num-layers N). Null: every layer."""
    offload_layers: int = field(default=0, metadata={"min": 0, "max": MAX_LAYERS_RECOMPUTED})
    """Activation offloading: the first N layers' stored activations go to host memory in the forward, back for the
    backward (Megatron's --cpu-offloading-num-layers; `plan/offload.py`; `offload_spec.py` says what is refused)."""
    attention: str = field(default="flash", metadata={"choices": ("flash", "eager")})
    """flash: the scores are never stored (FlashAttention); eager: softmax scores and dropout mask are (s^2 terms)."""
    optimizer: str = field(default="adamw", metadata={"choices": ("adamw", "sgd", "lamb")})
    """adamw: two moments per parameter; lamb: those and a per-tensor trust ratio (`step_ops.LAMB_EXTRA_BYTES`); sgd: none (no momentum)."""
    adam_moment_dtype: str = field(default="fp32", metadata={"choices": ("fp32", "bf16", "fp16", "fp8")})
    """What AdamW's / LAMB's two moments are stored in: Megatron's precision-aware optimizer (--use-precision-aware-optimizer
    --exp-avg-dtype / --exp-avg-sq-dtype, TE's FusedAdam), DeepSeek-V3's BF16 (report §3.3.4). Memory and the step's traffic."""
    optimizer_impl: Optional[str] = field(default=None, metadata={"choices": ("fused", "foreach", "for_loop")})
    """Which implementation steps it, for a calibration profile's curves; null: the framework's (`optimizer_impl`)."""
    grad_dtype: Optional[str] = field(default=None, metadata={"choices": ("fp32", "bf16", "fp16")})
    """Gradient accumulation and reduction dtype (bf16, fp16: 2 bytes); null = fp32 (Megatron's main_grad, nanotron's)."""
    grad_accum_fused: bool = True
    """True: the weight-gradient GEMM accumulates straight into the fp32 buffer (Megatron's gradient_accumulation_fusion).
    False: a gradient in the weights' dtype is produced and added to the accumulator after every micro-batch (nanotron's
    FP32GradientAccumulator: +10 B/param of traffic, +2 B/param held for the bf16 gradient; autograd's fp32 `.grad`: +12)."""

    documents: Optional[Documents] = None
    """Documents packed into each sequence (`plan/documents.py`): their length distribution; null = one document
    per sequence."""
    attention_mask: str = field(default="causal", metadata={"choices": ("causal", "document")})
    """causal: every token attends to all earlier tokens of its sequence; document: only to those of its own
    document (needs `documents`): attention costs the documents' sum of squares."""
    loss: str = field(default="standard", metadata={"choices": ("standard", "fused", "cut")})
    """The cross-entropy over the vocabulary (`plan/step_ops.py`): standard keeps fp32 logits (Megatron's, nanotron's);
    fused computes the gradient in place of the bf16 logits in one kernel (TE's / Megatron's cross_entropy_fusion);
    cut never writes the logits (Cut Cross-Entropy, Wijmans et al. 2024), recomputing them in the backward."""
    loss_chunk_tokens: Optional[int] = field(default=None, metadata={"min": 1, "max": MAX_SEQ_LEN})
    """With loss fused: the LM head and its loss run over chunks of this many tokens, each chunk's gradients
    computed at once (Liger-Kernel's fused linear cross-entropy): only one chunk's logits exist at a time and
    the head input's gradient is kept instead of the logits. Null: one chunk (all tokens)."""

    autocast: bool = False
    """bf16 through `torch.autocast` around the whole step instead of bf16 module weights (PyTorch AMP):
    fp32 parameters (the optimizer's master is the parameter itself), fp32 `.grad`, Adam's m and v, and
    autocast's bf16 copy of each weight, cast on the first forward and cached until the step's backward
    ends (freed before the optimizer step); with gradient accumulation autograd casts each micro-batch's
    bf16 weight gradient to fp32 and adds it into `.grad`. The residual stream stays fp32 (norms and residual adds
    run in fp32) and each projection casts its input to bf16 (simulator/plan/autocast_ops.py). The replay's layout
    on a GPU without ZeRO."""

    @property
    def grad_bytes(self) -> int:
        return 2 if self.grad_dtype in ("bf16", "fp16") else 4


@dataclass(frozen=True, kw_only=True)
class Cluster:
    topology: str
    """A file name in topologies/ without its extension, or a path to a topology YAML."""
    nodes: int = field(default=1, metadata={"min": 1, "max": MAX_GPUS, "why": "at most 2**20 GPUs in all"})
    """Nodes; GPUs = nodes x gpus_per_node, at most MAX_GPUS."""
    gpus_per_node: Optional[int] = field(default=None, metadata={"min": 1, "max": MAX_GPUS})
    """Defaults to the topology's; at most the topology node's GPUs (a job may use part of a node)."""
    profile: str = "default"
    """default = the spec-based profile of the topology's GPU; or a path to a calibration profile, which
    must have been measured on the topology's GPU (`profile.profile_mismatch`) unless
    allow_profile_mismatch."""
    allow_profile_mismatch: bool = False
    """Price the scenario with a profile measured on another device kind (a CPU profile for an H100
    topology): the report then carries a warning. `run --allow-profile-mismatch` sets it."""
    cudnn_version: Optional[str] = None
    """The cuDNN release the stack runs, as a quoted string ('9.10.2'; torch.backends.cudnn.version() 91002): cuDNN
    attention is priced from the GPU's published points of the newest release not newer than it, the oldest where
    all are newer; points that name no release (the H100's, from FlashAttention-3's paper) are older than every
    named one (`cost/cudnn_release.py`; published releases: docs/modeling.md). Null: the newest published."""
    memory_headroom_gib: Optional[float] = field(default=None, metadata={"min": 0.0, "max": 1e5})
    """Memory each GPU must keep free for a layout to fit (peak <= capacity - headroom; docs/metrics.md).
    Null: 5 % of the GPU's memory (`memory_fit.DEFAULT_HEADROOM_FRACTION`), 4.0 GiB on an 80 GB H100."""
    stragglers: list[Straggler] = field(default_factory=list)
    """Slow GPUs: a list of {rank: R, slowdown: X} or {node: N, slowdown: X} (`simulator/stragglers.py`); each
    pipeline stage runs at the pace of its slowest GPU."""
    slow_gpus: Optional[SlowGpus] = None
    """A share of the GPUs drawn slow at random with a seed: {share, slowdown_min, slowdown_max, seed}."""
    degraded_links: list[DegradedLink] = field(default_factory=list)
    """Links below their bandwidth: a list of {node: N, link: nic | nvlink, bandwidth: share in [0.001, 1]}
    (`simulator/cluster_mix.py`); every collective or send whose group crosses that link runs at its pace."""
    pools: list[Pool] = field(default_factory=list)
    """Mixed GPUs: a list of {gpu: <topology name>, nodes: N}, placed in node order, nodes summing to `nodes`;
    each pool has that topology's GPU and node, the fabric is `topology`'s. Empty: one pool."""
    efficiency: dict[str, float] = field(default_factory=dict)
    """Per-software-stack overrides of the spec roofline (costs.py): gemm, gemm_fp8, attention_fwd, attention_bwd,
    hbm (fractions of peak), gemm_fp8_vs_bf16 / gemm_mxfp8_vs_fp8 (FP8 GEMMs at a multiple of the BF16 GEMMs' share of
    peak in a step, MXFP8 ones of FP8's; TE's: frameworks/transformer_engine.yaml), triton_fa_vs_transfer (the Triton
    FlashAttention kernel at a multiple of its published transfer's speed; Composer's), tp_comm_overhead_s (seconds added to every TP collective) and
    tp_internode_overhead_s (added again per node beyond the first that the TP group spans); tp_host_s and
    tp_host_per_rank_s (host seconds to issue each TP collective, + per TP rank: `CostModel.host_time`); dp_comm_overhead_s,
    dp_ring_step_latency_us (DP collectives); comm_sm_share (an in-flight collective's share of the compute rate: `sm_share.py`)."""


@dataclass(frozen=True, kw_only=True)
class Parallel:
    dp: Optional[int] = field(default=None, metadata={"min": 1, "max": MAX_GPUS})
    """Null: GPUs / (tp * pp * cp). Every degree is at most MAX_GPUS (their product is the GPUs)."""
    tp: int = field(default=1, metadata={"min": 1, "max": MAX_GPUS})
    """Tensor parallel size (Megatron: column/row-parallel linears)."""
    pp: int = field(default=1, metadata={"min": 1, "max": MAX_GPUS})
    """Pipeline stages."""
    cp: int = field(default=1, metadata={"min": 1, "max": MAX_GPUS})
    """Context parallel size: the sequence split over cp ranks (see cp_comm)."""
    ep: int = field(default=1, metadata={"min": 1, "max": MAX_GPUS})
    """Expert parallel; borrows from dp*cp for the expert layers (from tp*cp*dp with etp 1)."""
    etp: Optional[int] = field(default=None, metadata={"min": 1, "max": MAX_GPUS})
    """Expert tensor parallel, Megatron's MoE parallel folding (simulator/ep_spec.py): null = EP cut from dp*cp at every TP rank."""
    dp_replicate: int = field(default=1, metadata={"min": 1, "max": MAX_GPUS})
    """HSDP: the dp x cp ranks split into this many replicas, each sharding the dense parameters (ZeRO-1-3) over
    its own dp x cp / dp_replicate neighbouring ranks; gradients reduce-scattered inside a replica, then their
    shard all-reduced across the replicas (torchtitan's data_parallel_replicate_degree, Megatron's
    --num-distributed-optimizer-instances). 1: one group."""
    zero: int = field(default=0, metadata={"choices": (0, 1, 2, 3)})
    """ZeRO stage over the DP (x CP) group: 0 plain DP; 1 optimizer states sharded (Megatron's distributed
    optimizer); 2 gradients too; 3 parameters too (FSDP)."""
    sp: bool = False
    """Sequence parallel in the TP regions (Megatron SP; nanotron tp_mode REDUCE_SCATTER)."""
    pp_schedule: str = field(default=DEFAULT_SCHEDULE, metadata={"choices": SCHEDULES, "alias": schedule_alias, "not_modelled": NOT_MODELLED})
    """Pipeline schedule (`schedules.SCHEDULES`; frameworks' names read as these, `SCHEDULE_ALIASES`): afab (GPipe), 1f1b,
    interleaved-1f1b (vpp >= 2; the default with vpp >= 2 where the framework runs it), zb-h1, zbv, dualpipev and dualpipe
    (vpp 2; dualpipe: bidirectional, two copies of the model, pp and micro-batches even)."""
    vpp: int = field(default=1, metadata={"min": 1, "max": MAX_LAYERS})
    """Model chunks per pp rank, as the schedule allows (`ScheduleSpec.vpp`: interleaved >= 2, V-shaped 2, their default)."""
    pp_layers: Optional[list[int]] = None
    """Layers per model chunk, pp*vpp entries in pipeline order (dualpipe: per stage of one copy, pp entries)."""
    pp_balance: str = field(default="even", metadata={"choices": ("even", "speed")})
    """even: the framework's split (or pp_layers); speed: layers per stage in proportion to each stage's speed on
    one decoder layer (`cost/pp_balance.py`: mixed pools, stragglers, degraded links), setting pp_layers (vpp 1)."""
    dp_balance: str = field(default="even", metadata={"choices": ("even", "speed")})
    """With pools on different DP replicas: even micro-batches per replica, or by each pool's speed (`cost/pp_balance.py`)."""
    pp_p2p: str = field(default="async", metadata={"choices": ("async", "blocking")})
    """Pipeline sends. async: the sender goes on while its activation or gradient moves, the receiver waits
    only for its arrival (sends issued ahead, Megatron's batched isend/irecv). blocking (1F1B only): each
    send holds its sender until delivered and each receive holds its receiver for the transfer, one after
    the other (nanotron's `send_tensors` / `recv_tensors`): in the 1F1B steady state an interior stage then
    pays 4 sends per micro-batch and an end stage 2, against 2 and 1 with async."""
    order: str = "tp-cp-ep-dp-pp"
    """Rank placement, innermost first."""
    dp_bucket_mb: float = field(default=25.0, metadata={"min": 0.001, "max": 1e9})
    """Gradient bucket size in MB (1e6 bytes) for DP / ZeRO communication (PyTorch DDP's bucket_cap_mb
    default: 25); the rank's gradients may fill at most MAX_DP_BUCKETS of them."""
    dp_bucketing: str = field(default="param", metadata={"choices": ("param", "even")})
    """How gradients are grouped into DP buckets (`ops.dp_buckets`). param: whole parameter tensors, a
    bucket closing once it holds dp_bucket_mb (PyTorch DDP, Megatron), so a tensor larger than that (an
    embedding, a fused MLP weight) is a bucket alone; even: the rank's gradient bytes cut into equal
    buckets of at most dp_bucket_mb."""
    overlap_dp: bool = True
    """DP / ZeRO collectives run under the backward (and ZeRO-3 gathers are prefetched); false: after it."""
    overlap_tp: bool = False
    """With sp: each TP all-gather / reduce-scatter rides the GEMM that consumes / produces it in tp chunks
    (TransformerEngine userbuffers, PyTorch async TP; `plan/tp_overlap.py`): one chunk in tp stays exposed,
    the rest hides as far as the GEMM is longer; false: every TP collective exposed."""
    tp_linear_async: bool = False
    """Each column-parallel linear (QKV, FC1) runs its backward collectives under its own GEMMs: with sp the SP
    input's re-gather under the dgrad GEMM and the dgrad's reduce-scatter under the wgrad GEMM, without sp the
    dgrad's all-reduce under the wgrad GEMM (Megatron's
    `LinearWithGradAccumulationAndAsyncCommunication` and Transformer Engine's linears without userbuffers: on by
    default under framework megatron; nanotron's `tp_linear_async_communication`). Every other TP collective stays
    exposed; the forward all-gather's overlap with the local 1/tp of the GEMM is not modelled. `overlap_tp: true`
    supersedes it."""
    diloco: Optional[DiLoCo] = None
    """Train across datacenters DiLoCo's way (`simulator/diloco_spec.py`): {outer_every: H, compression, overlap};
    needs a topology with `datacenters.sites` > 1; the layout above is each site's."""
    cp_balance: str = field(default="zigzag", metadata={"choices": ("zigzag", "document")})
    """How a sequence is dealt to the CP ranks (`plan/documents.py`): zigzag chunks (balanced for one document
    per sequence), or every document split over the ranks (Llama 3's; balanced with a document mask too)."""
    cp_comm: str = field(default="ring", metadata={"choices": ("ring", "allgather")})
    """ring: K/V passed around the CP group (zig-zag balanced); allgather: Llama 3's all-gather of K/V."""
    ep_imbalance: float = field(default=1.0, metadata={"min": 1.0, "max": MAX_EP_IMBALANCE})
    """Tokens on the busiest expert rank over the mean (1.0 = perfectly balanced routing); at most ep (every
    token on one rank), checked with the layout."""
    ep_dispatcher: str = field(default="alltoall", metadata={"choices": ("alltoall", "deepep")})
    """How routed tokens reach their experts' ranks. alltoall: one NCCL all-to-all, a copy per (token,
    expert) (Megatron's alltoall dispatcher). deepep: DeepEP's kernels, a token sent once to each node
    it reaches over InfiniBand and forwarded within the node over NVLink, dispatched in FP8 under
    precision fp8, combined in BF16 (DeepSeek-V3 report §3.2.2, §3.3.4; Megatron's flex dispatcher).
    Compute overlapped with either runs on the SMs its kernels leave (`cost/ep_sm_share.py`)."""
    ep_overlap: bool = False
    """Megatron's EP all-to-all overlap (`--overlap-moe-expert-parallel-comm`, `plan/ep_overlap.py`): in the 1F1B steady
    state a forward and another micro-batch's backward run as one pass, each one's all-to-alls under the other's compute;
    one warm-up forward more. Needs ep > 1 and interleaved-1f1b (or 1f1b with pp = 1)."""
    zero_gather: str = field(default="bucketed", metadata={"choices": ("bucketed", "whole")})
    """ZeRO-1/2 parameter all-gather: `bucketed` in dp_bucket_mb buckets, issued when the step starts and
    waited for by the first forward that needs each (Megatron's overlap_param_gather; after the optimizer,
    exposed, when DP does not overlap); `whole`: one all-gather of all the rank's updated parameters (per
    model chunk with vpp > 1) after the optimizer step, exposed (nanotron's
    `ZeroDistributedOptimizer._all_gather_params`)."""
    reshard_after_forward: bool = True
    """ZeRO-3 only: free each block's gathered parameters after its forward and all-gather them again before
    its backward (FSDP2's `reshard_after_forward=True`, DeepSpeed stage 3). false keeps them from the forward
    to the backward: one all-gather per micro-batch instead of two, the rank's unsharded parameters held
    (FSDP2 `reshard_after_forward=False`, torchtitan's choice under pipeline parallelism)."""
    zero_gather_inplace: bool = True
    """ZeRO-1/2: the updated parameters are all-gathered straight into the weights (Megatron's distributed
    optimizer, FSDP). false: into a separate full-size buffer, from a cast copy of the local shard
    (nanotron), which the optimizer step's peak holds: + weight bytes x (1 + 1/dp) per parameter."""


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str
    model: ModelSpec
    training: Training
    cluster: Cluster
    parallel: Parallel
    topology: Topology
    run: RunSpec = RunSpec()
    """The whole training run (`run:`, `training.tokens`): tokens, phases, checkpoints (wholerun/spec.py)."""
    framework: FrameworkChoice = FrameworkChoice()
    """The training framework priced (`framework:`; frameworks/*.yaml): what its words mean, its options."""
    pool_topologies: tuple = ()
    """Each `cluster.pools` entry's topology (its GPU and node, the fabric of `topology`), read with the scenario."""

    @property
    def gpus_per_node(self) -> int:
        return self.cluster.gpus_per_node or self.topology.node.gpus

    @property
    def gpus(self) -> int:
        return self.cluster.nodes * self.gpus_per_node

    @property
    def dp(self) -> int:
        return self.parallel.dp  # always resolved by validation

    @property
    def micro_batches(self) -> int:
        """m: micro-batches per pipeline per step = global_batch / (dp * micro_batch)."""
        return self.training.global_batch // (self.dp * self.training.micro_batch)

    @property
    def tokens_per_step(self) -> int:
        return self.training.global_batch * self.training.seq_len

    @property
    def overlap_dp(self) -> bool:
        """DP / ZeRO communication overlaps compute: asked for (`parallel.overlap_dp`) and possible on the
        hardware (`node.comm_overlaps_compute`)."""
        return self.parallel.overlap_dp and self.topology.node.comm_overlaps_compute

    @property
    def overlap_tp(self) -> bool:
        return self.parallel.overlap_tp and self.topology.node.comm_overlaps_compute

    @property
    def overlap_cp(self) -> bool:
        """The CP ring passes K/V on while the attention blocks compute (no key: always, where it can)."""
        return self.topology.node.comm_overlaps_compute


@dataclass(frozen=True, kw_only=True)
class _RawScenario:
    name: str = "unnamed scenario"
    model: Any = None
    training: dict = field(default_factory=dict)
    cluster: dict = field(default_factory=dict)
    parallel: dict = field(default_factory=dict)
    run: Any = None
    framework: Any = None


# ----------------------------------------------------------------------------------- loading

def read_yaml(path: Path) -> Any:
    """A YAML file as plain data: UTF-8, safe tags, each key once, nested at most inputs.MAX_DEPTH."""
    return read_yaml_file(path, str(path))


def load_scenario(path: str | Path, overrides: list[str] = ()) -> Scenario:
    path = Path(path)
    if existing_file(str(path), path) is None:
        raise ScenarioError(short(str(path)), "no such scenario file")
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ScenarioError(str(path), f"a scenario must be a YAML mapping, got {type(raw).__name__}")
    return scenario_from_mapping(raw, overrides, base_dir=path.parent)


def scenario_from_mapping(raw: dict, overrides: list[str] = (), base_dir: Path | None = None) -> Scenario:
    raw = apply_overrides(raw, list(overrides), base_dir)
    if overrides and isinstance(raw.get("framework"), dict):
        # a key set on the command line is the last word: the file's framework options that set it give way
        raw["framework"] = drop_options_setting(raw["framework"], *override_keys(overrides))
    raw, framework = apply_framework(raw)
    top = from_mapping(_RawScenario, raw, "")
    if top.model is None:
        raise ScenarioError("model", "missing required key", "a preset name, a path to config.json, or a mapping")
    model = load_model(top.model, base_dir)
    model = without_config_mtp(model, top.model, framework.spec.mtp_from_config)
    training_raw = dict(top.training)
    run_raw = top.run
    if "tokens" in training_raw:  # `training.tokens` is the run's length: read with the `run:` section
        if isinstance(run_raw, dict) and ("tokens" in run_raw or run_raw.get("phases")):
            raise ScenarioError("training.tokens", "given together with run.tokens or run.phases", "one of them")
        run_raw = {**(run_raw if isinstance(run_raw, dict) else {}), "tokens": training_raw.pop("tokens")}
    run = parse_run(run_raw)
    training = from_mapping(Training, training_raw, "training")
    if isinstance(top.cluster, dict) and top.cluster.get("cudnn_version") is not None:  # before the schema's type
        cudnn_release(top.cluster["cudnn_version"], "cluster.cudnn_version")  # check: say how to write 9.10 or 91002
    cluster = from_mapping(Cluster, top.cluster, "cluster")
    parallel = from_mapping(Parallel, top.parallel, "parallel")
    check_efficiency(cluster.efficiency)
    if training.documents is not None:
        training = replace(training, documents=resolve_documents(training.documents, base_dir))
    if training.loss_chunk_tokens is not None and training.loss != "fused":
        raise ScenarioError("training.loss_chunk_tokens", f"with loss {training.loss}", "loss: fused (chunks of a fused loss)")
    if training.attention_mask == "document" and training.documents is None:
        raise ScenarioError("training.attention_mask", "document without training.documents", "training.documents, or causal")
    topology = load_topology(cluster.topology, base_dir)
    if cluster.profile not in ("default",) and base_dir is not None and not Path(cluster.profile).is_absolute():
        local = existing_file(cluster.profile, base_dir / cluster.profile)
        if local is not None:
            cluster = replace(cluster, profile=str(local))
    pools, pool_topologies = resolve_pools(cluster, parallel, topology, base_dir)
    sc = Scenario(name=str(top.name), model=model, training=training, cluster=replace(cluster, pools=pools), parallel=parallel,
                  topology=topology, run=run, framework=framework, pool_topologies=pool_topologies)
    return validate_layout(sc)


def _divides(a: int, b: int) -> bool:
    return a > 0 and b % a == 0


def validate_layout(sc: Scenario) -> Scenario:
    """Cross-key checks (the layout rules at the top of docs/scenario.md); fills dp when omitted."""
    m, t, p = sc.model, sc.training, sc.parallel
    p = layout_rules(sc.framework, p, m)
    node_gpus = sc.topology.node.gpus
    # a GPU node has node.gpus; a host topology's "GPUs" are CPU processes, as many as a run starts
    if sc.cluster.gpus_per_node is not None and sc.cluster.gpus_per_node > node_gpus and sc.topology.node.interconnect != "host":
        raise ScenarioError("cluster.gpus_per_node", f"{sc.cluster.gpus_per_node} but a {sc.topology.name} node has {node_gpus} GPUs",
                            f"1 .. {node_gpus}")
    gpus = sc.gpus
    if gpus > MAX_GPUS:
        raise ScenarioError("cluster.nodes", f"{sc.cluster.nodes:,} nodes x {sc.gpus_per_node} GPUs = {gpus:,} GPUs",
                            f"at most {MAX_GPUS:,} GPUs in all (the simulator's limit)")
    check_stragglers(sc.cluster.stragglers, sc.cluster.slow_gpus, gpus, sc.gpus_per_node)
    if p.diloco is not None:
        d = sc.topology.datacenters
        if d is None or d.sites < 2:
            raise ScenarioError("parallel.diloco", f"given on {sc.topology.name}, one site", "a topology with datacenters.sites >= 2")
        if sc.cluster.nodes % d.sites or sc.cluster.nodes // d.sites > d.nodes_per_site:
            raise ScenarioError("cluster.nodes", f"{sc.cluster.nodes} nodes for DiLoCo over {d.sites} sites of {d.nodes_per_site}",
                                f"a multiple of {d.sites}, at most {d.sites * d.nodes_per_site}")
    fixed = p.tp * p.pp * p.cp
    if p.dp is None:
        if gpus % fixed:
            raise ScenarioError("parallel", f"tp*pp*cp = {fixed} does not divide the {gpus} GPUs", "tp*pp*cp dividing nodes x gpus_per_node")
        p = replace(p, dp=gpus // fixed)
    if p.dp * fixed != gpus:
        raise ScenarioError("parallel", f"dp*tp*pp*cp = {p.dp}*{p.tp}*{p.pp}*{p.cp} = {p.dp * fixed} but the cluster has {gpus} GPUs",
                            f"degrees whose product is {gpus}")
    order = p.order.split("-")
    if sorted(order) != sorted(DIMS):
        raise ScenarioError("parallel.order", f"{p.order!r} must name each of tp, cp, ep, dp, pp once", "e.g. tp-cp-ep-dp-pp")
    if abs(order.index("ep") - order.index("dp")) != 1:
        # EP groups are cut from the data-parallel ranks (layout.group_ranks), so `ep` says where inside or
        # outside dp they sit; elsewhere it would mean nothing (Megatron's RankGenerator has the same rule)
        raise ScenarioError("parallel.order", f"{p.order!r} puts ep apart from dp; EP borrows its ranks from dp",
                            "ep right before dp (EP groups of neighbouring dp ranks, e.g. tp-cp-ep-dp-pp) or right after "
                            "it (EP groups strided across dp, e.g. tp-cp-dp-ep-pp)")
    if not _divides(p.tp, m.heads):
        raise ScenarioError("parallel.tp", f"{p.tp} does not divide the model's {m.heads} attention heads", "a divisor of heads")
    if not (_divides(p.tp, m.n_kv) or _divides(m.n_kv, p.tp)):
        raise ScenarioError("parallel.tp", f"{p.tp} neither divides nor is a multiple of kv_heads {m.n_kv}", "a divisor or multiple of kv_heads")
    ffn = [m.ffn_hidden] + ([m.moe.expert_ffn_hidden] if m.moe else [])
    if not all(_divides(p.tp, f) for f in ffn):
        raise ScenarioError("parallel.tp", f"{p.tp} does not divide the FFN size {ffn}", "a divisor of ffn_hidden")
    if p.diloco is not None and (p.dp % sc.topology.datacenters.sites or t.global_batch % sc.topology.datacenters.sites):
        raise ScenarioError("parallel.dp", f"{p.dp} (global_batch {t.global_batch}) with DiLoCo over {sc.topology.datacenters.sites} sites",
                            "dp and global_batch multiples of the sites (each site trains its own replica)")
    if t.global_batch % (p.dp * t.micro_batch):
        raise ScenarioError("training.global_batch", f"{t.global_batch} is not divisible by dp*micro_batch = {p.dp}*{t.micro_batch}",
                            "a multiple of dp*micro_batch")
    if t.recompute_layers is not None and t.recompute != "full":
        raise ScenarioError("training.recompute_layers", f"{t.recompute_layers} with recompute {t.recompute}",
                            "recompute full (block recomputation of the first N layers of each chunk), or null")
    if t.autocast and t.precision != "bf16":
        raise ScenarioError("training.autocast", f"true with precision {t.precision}", "precision bf16 (autocast casts fp32 weights to bf16)")
    if t.autocast and t.grad_dtype in ("bf16", "fp16"):
        raise ScenarioError("training.autocast", "true with grad_dtype bf16 (autocast's .grad is fp32)", "grad_dtype fp32 or null")
    if t.autocast and p.zero:
        raise ScenarioError("training.autocast", f"true with parallel.zero {p.zero} (sharded states cast through FSDP2's mixed-precision policy)",
                            "parallel.zero 0")
    if p.dp_replicate > 1 and (p.zero == 0 or (p.dp * p.cp) % p.dp_replicate):
        raise ScenarioError("parallel.dp_replicate", f"{p.dp_replicate} with zero {p.zero} and dp x cp = {p.dp * p.cp}",
                            "a divisor of dp x cp, with a sharded ZeRO stage (1-3): replicas of one sharded group")
    if not p.reshard_after_forward and p.zero != 3:
        raise ScenarioError("parallel.reshard_after_forward", f"false with parallel.zero {p.zero}", "true, or parallel.zero 3")
    if p.overlap_tp and p.tp > 1 and not p.sp:
        raise ScenarioError("parallel.overlap_tp", "true without sequence parallelism (parallel.sp)",
                            "sp: true too (Megatron's --tp-comm-overlap asserts it, arguments.py:1441; torchtitan's "
                            "async TP overlaps the SP all-gathers and reduce-scatters), or overlap_tp: false")
    if p.sp and t.seq_len % (p.tp * p.cp):
        raise ScenarioError("training.seq_len", f"{t.seq_len} is not divisible by tp*cp = {p.tp * p.cp} (sequence parallel)")
    if p.cp > 1 and t.seq_len % (2 * p.cp):
        raise ScenarioError("training.seq_len", f"{t.seq_len} is not divisible by 2*cp = {2 * p.cp} (zig-zag context parallel)")
    check_expert_parallel(p, m, t)  # ep against the model and dp x cp; ep_overlap's refusals (ep_spec.py)
    m_micro = t.global_batch // (p.dp * t.micro_batch)
    if m_micro > MAX_MICRO_BATCHES:
        raise ScenarioError("training.global_batch", f"{t.global_batch:,} gives {m_micro:,} micro-batches per pipeline "
                            f"(global_batch / (dp*micro_batch))", f"at most {MAX_MICRO_BATCHES:,}: raise micro_batch or dp")
    if p.ep > 1 and p.ep_imbalance > p.ep:
        raise ScenarioError("parallel.ep_imbalance", f"{p.ep_imbalance} with ep {p.ep}",
                            f"1 .. ep = {p.ep} (all tokens on one rank is ep x the mean)")
    if p.dp * p.cp > 1 and p.dp_bucketing == "even":  # `param` buckets hold whole tensors: at most one per tensor
        from .params import total_params  # noqa: PLC0415 (params imports model only)
        buckets = total_params(m) * 4 / (p.tp * p.pp) / (p.dp_bucket_mb * 1e6)
        if buckets > MAX_DP_BUCKETS:
            raise ScenarioError("parallel.dp_bucket_mb", f"{p.dp_bucket_mb:g} MB cuts each rank's gradients into ~{buckets:,.0f} buckets",
                                f"at most {MAX_DP_BUCKETS:,} buckets: dp_bucket_mb >= {total_params(m) * 4 / (p.tp * p.pp) / MAX_DP_BUCKETS / 1e6:.3g}")
    check_pipeline(p, m.layers, m_micro)  # the schedule's pp, vpp, sends, micro-batches and layer split (pipeline_spec.py)
    if t.recompute_modules is not None:
        if t.recompute != "selective":
            raise ScenarioError("training.recompute_modules", f"given with recompute {t.recompute}", "recompute: selective")
        for i, name in enumerate(t.recompute_modules):
            if name not in RECOMPUTE_MODULES:
                raise ScenarioError(f"training.recompute_modules[{i}]", f"unknown module {short(name)}", ", ".join(RECOMPUTE_MODULES))
    hardware_rules(sc.framework, t.precision, [sc.topology.gpu, *(pt.gpu for pt in sc.pool_topologies)])
    check_offload(sc.framework, t, p, m, [sc.topology, *sc.pool_topologies])
    return check_cluster_mix(replace(sc, parallel=p))
