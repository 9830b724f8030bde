"""What a training framework does, as data: one YAML file per framework in this package (`megatron.yaml`,
`torchtitan.yaml`, `deepspeed.yaml`, `nanotron.yaml`, `composer.yaml`), read strictly into a `Framework`.

A framework file says, each entry with its source (a file and line of the framework, a doc, a paper):
- `zero`: what the words `parallel.zero: N` mean there (Megatron's "ZeRO-2" is its distributed optimizer,
  one gradient reduce-scatter per step; DeepSpeed's stage 2 reduces after every micro-batch), as a
  sharding policy of `plan/policy.py`, or that the framework has no such stage;
- `options`: the switches a user writes under `framework:` (`{name: megatron, overlap_grad_reduce: true}`),
  each with the framework's own default and the scenario key it sets;
- `defaults`: the scenario keys the framework fixes unless the scenario says otherwise (bucket sizes,
  gradient accumulation, pipeline sends), as dotted keys;
- `attention_kernel`: the attention kernel family it runs (`ATTENTION_KERNELS`); an option's value may run another
  (`Option.attention_kernel`: torchtitan's `sdpa_backend`, MPT's `attn_impl`);
- `fp8_recipe`: which FP8 casts its linears run (`FP8_RECIPES`; `plan/opgraph.py` prices each); an option's value
  may run another (`Option.fp8_recipe`: Megatron's `fp8_recipe`);
- `tp_overlap`: what `parallel.overlap_tp` overlaps there (`TP_OVERLAPS`; `plan/tp_overlap.py` prices each);
- `tp_wgrad_input`: whether a column-parallel linear's weight gradient re-gathers its SP input (`TP_WGRAD_INPUTS`);
- `pp_split`: how it splits layers over pipeline stages (`even`: layers divisible by stages, or an error;
  `cost-balanced`: nanotron's cumulative compute-cost thresholds; `remainder-first`: torchtitan's, the
  embedding and the output counted as a layer each; `pp_split.py`);
- `efficiency`: the stack's measured efficiencies (`cluster.efficiency` keys), fitted where the source says. An
  entry may name a constant of a kernel library instead of a number (`value: transformer_engine.gemm_fp8_vs_bf16`):
  the constant lives once in `<library>.yaml` here (`SHARED_CONSTANTS`) and every framework running those
  kernels refers to it, so a number fitted on one framework's runs is transferred, not copied.

`resolve.py` applies a framework to a scenario mapping; nothing else reads these files.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from ..errors import ScenarioError
from ..inputs import read_yaml_file
from ..schema import from_mapping

DIRECTORY = Path(__file__).resolve().parent
FRAMEWORKS = ("megatron", "torchtitan", "deepspeed", "nanotron", "composer")
"""The frameworks clustersim prices, one `<name>.yaml` each; `megatron` is the default."""
DEFAULT_FRAMEWORK = "megatron"
POLICY_NAMES = ("ddp", "zero1", "zero2", "zero3")
"""`plan/policy.py` policies a `zero` entry may name (ZeRO-3 without reshard is `reshard_after_forward`)."""
SETTABLE_SECTIONS = ("training", "parallel", "cluster")
"""Top-level scenario sections a framework default or option may set."""
ATTENTION_KERNELS = ("flash2", "flash3", "cudnn", "triton_fa")
"""Attention kernel families with published tables (`cost/kernel_data.py` FAMILIES; a test keeps the two equal:
the scenario layer does not import the cost layer)."""
PP_SPLITS = ("even", "cost-balanced", "remainder-first")
SELECTIVE_RECOMPUTES = ("core_attn", "op")
FP8_RECIPES = ("te_delayed", "te_delayed_uncached", "te_current", "te_mxfp8", "torchao_tensorwise",
               "torchao_rowwise", "torchao_rowwise_gw_hp", "torchao_mxfp8")
"""FP8 cast pricings (`plan/opgraph.py` FP8_CASTS has one each): Transformer Engine's fused cast(-transpose)
kernels with delayed scaling, the weights' FP8 copies cached across a step's micro-batches (`te_delayed`: the
caller passes `is_first_microbatch`) or cast on every forward (`te_delayed_uncached`: it does not); Transformer
Engine's per-tensor current scaling (`te_current`: amax, scale and cast kernels for each tensor, a grouped GEMM's
experts one by one); Transformer Engine's MXFP8 block scaling (`te_mxfp8`: one kernel per tensor, both scaled
copies, 32-value blocks; a GPU with `mx_formats` only); torchao's dynamic tensorwise casts (`torchao_tensorwise`)
its rowwise recipes and its MXFP8 (`torchao_mxfp8`: torchtitan's MX converter)."""
FP4_RECIPES = ("te_nvfp4",)
"""FP4 cast pricings (`training.precision: fp4`; `plan/opgraph.py` FP8_CASTS has one each): Transformer Engine's
NVFP4 block scaling (`te_nvfp4`: E2M1 with an E4M3 scale per 16 values and one per tensor, random Hadamard transforms
on the weight gradient's inputs, 16x16 blocks for the weights); a GPU with an fp4 peak only."""
OFFLOAD_SCHEMES = ("te_v1", "te_v2")
"""How `training.offload_layers` moves stored activations to host memory and back (`plan/offload.py` prices each):
Transformer Engine's first implementation (`te_v1`: copies of marked tensors one layer at a time on a device-to-host
stream, the compute waiting at evenly spaced layers, reloads one layer at a time on a host-to-device stream), or its
second (`te_v2`, TransformerEngine 2.12's default: every saved tensor of 256K elements or more but the weights, all
copies on one stream, each layer's due before the layer that keeps the resident count at layers - N)."""
BLOCK_SCALED_RECIPES = ("te_mxfp8", "torchao_mxfp8")
"""FP8 recipes whose GEMMs scale 32-value blocks in the tensor cores: they run only on a GPU with
`topology.GPUSpec.mx_formats` (TransformerEngine v2.6 pytorch/fp8.py:47-53, check_mxfp8_support: compute
capability 10.0 or higher)."""
TP_OVERLAPS = ("userbuffers", "micro_pipeline")
"""What `parallel.overlap_tp` overlaps (`plan/tp_overlap.py`): every SP all-gather and reduce-scatter beside its
GEMM, the backward's and the weight gradient's included (`userbuffers`: Transformer Engine's userbuffers under
Megatron's --tp-comm-overlap; null means this), or only the pairs PyTorch's micro-pipeline TP pass matches
(`micro_pipeline`: torchtitan's async TP)."""
TP_WGRAD_INPUTS = ("regather", "saved")
"""Where a column-parallel linear's weight gradient gets its gathered SP input: all-gathered again in the
backward (`regather`: Megatron, KOR22 §4.2.2; null means this), or the forward's gathered tensor, kept by
autograd or re-made by the recompute's own all-gather (`saved`: DTensor TP)."""
OPTIMIZER_IMPLS = ("fused", "foreach", "for_loop")
"""Adam's implementations, as calibrate's optimizer probe names them (`torch.optim.AdamW` fused / foreach / the
per-tensor loop)."""
MOE_HOST_SYNCS = {"dropless": "token-dropless layouts", "dropless_ep": "token-dropless layouts with ep > 1"}
"""Where a framework's token-dropless MoE dispatch makes the host wait for the GPU's per-expert token counts at every
MoE layer's forward (`Framework.moe_host_sync`), each with what it covers: every token-dropless layout (`dropless`),
or only those with ep > 1 (`dropless_ep`; `resolve.FrameworkChoice.moe_host_sync` applies it)."""
LACKABLE = ("parallel.tp", "parallel.pp", "parallel.cp", "parallel.ep")
"""Parallel dimensions a framework may lack (`Framework.lacks`): a layout under it must keep them at 1."""
SHARED_CONSTANTS = ("transformer_engine",)
"""Kernel libraries whose constants (`<name>.yaml` here) framework files may name as an efficiency value."""


@dataclass(frozen=True, kw_only=True)
class ZeroMeaning:
    """What `parallel.zero: N` means in this framework."""
    policy: Optional[str] = field(default=None, metadata={"choices": POLICY_NAMES})
    """The sharding policy priced; null: the framework has no such stage (a scenario asking is refused)."""
    policy_under_pp: Optional[str] = field(default=None, metadata={"choices": POLICY_NAMES})
    """The policy priced when pp > 1, where pipelining changes what the framework does (torchtitan's FSDP2
    under torch.distributed.pipelining: parameters and gradients unsharded across micro-batches, one
    reduce-scatter per step: ZeRO-1's traffic and memory); null: `policy`."""
    only_under_pp: bool = False
    """The stage exists only with pp > 1 (torchtitan's "ZeRO-1" is its FSDP2 under pipelining)."""
    reshard_after_forward: Optional[bool] = None
    """ZeRO-3 only: the framework's default for `parallel.reshard_after_forward`; null keeps the scenario's."""
    overlap_grad_sync: Optional[bool] = None
    """The framework's default for `parallel.overlap_dp` at this stage (null: the scenario's)."""
    note: str = ""
    """What the report says when the word means something else than DeepSpeed's stage (empty: nothing)."""
    note_under_pp: str = ""
    """What the report says with pp > 1 when `policy_under_pp` applies."""
    source: str


@dataclass(frozen=True, kw_only=True)
class Option:
    """A switch under `framework:`; it sets one scenario key."""
    doc: str
    default: Any = None
    """The framework's own default (null: the option leaves the key to the scenario unless given)."""
    sets: Optional[str] = None
    """Dotted scenario key (`parallel.overlap_dp`); null: no scenario key says it, the plan reads the option
    itself (`FrameworkChoice.option`: torchtitan's `compile`; `attention_kernel` below)."""
    values: Optional[dict] = None
    """Option value -> key value; null: the option's value is the key's."""
    choices: Optional[list[Any]] = None
    """Allowed option values; null: true | false (or a number with `scale`)."""
    requires: Optional[str] = None
    """Other options of the framework this one needs when true, comma-separated: a name (that option true:
    torchtitan's async TP is an Inductor pass, it needs `compile`) or name=value (that option at that value);
    null: none."""
    scale: Optional[float] = None
    """The option takes a positive number and sets the key to number x scale (DeepSpeed's bucket sizes in
    elements -> clustersim's MB)."""
    attention_kernel: Optional[dict] = None
    """Option value -> the attention kernel family that value runs (`kernel_data.FAMILIES`), in place of the
    framework's `attention_kernel` (MPT's attn_impl: flash -> flash2, triton -> triton_fa); a value it does not
    name, or null: the framework's."""
    fp8_recipe: Optional[dict] = None
    """Option value -> the FP8 casts that value runs (`FP8_RECIPES`), in place of the framework's `fp8_recipe`
    (Megatron's --fp8-recipe: delayed -> te_delayed, tensorwise -> te_current); a value it does not name, or
    null: the framework's."""
    activation_offload: Optional[dict] = None
    """Option value -> the activation offloading that value runs (`OFFLOAD_SCHEMES`), in place of the framework's
    `activation_offload` (Transformer Engine's NVTE_CPU_OFFLOAD_V1); a value it does not name, or null: the framework's."""
    source: str

    def needs(self) -> list[tuple[str, Any]]:
        """`requires` as (option, wanted value) pairs: a bare name wants true; `=true` / `=false` a boolean."""
        pairs = [n.strip().partition("=")[::2] for n in (self.requires or "").split(",") if n.strip()]
        return [(o, {"": True, "true": True, "false": False}.get(w, w)) for o, w in pairs]


@dataclass(frozen=True, kw_only=True)
class Sourced:
    value: Any
    source: str


@dataclass(frozen=True, kw_only=True)
class Framework:
    name: str
    title: str
    read: str
    """Which version of the framework the file describes (release or commit)."""
    zero: dict[str, ZeroMeaning]
    """'0'..'3' (YAML keys are read as strings) -> what the stage means here."""
    options: dict[str, Option] = field(default_factory=dict)
    defaults: dict[str, Sourced] = field(default_factory=dict)
    attention_kernel: Sourced
    fp8_recipe: Sourced
    """Which FP8 casts `training.precision: fp8` runs (`FP8_RECIPES`)."""
    fp4_recipe: Optional[Sourced] = None
    """Which FP4 casts `training.precision: fp4` runs (`FP4_RECIPES`); null: the framework's FP4 training is not
    priced here (the precision is refused)."""
    pp_split: Sourced
    multi_chunk_vpp: Optional[Sourced] = None
    """Model chunks per pp rank a multi-chunk schedule (interleaved-1f1b) gets when the scenario names it and writes
    no `parallel.vpp` (torchtitan: 2); null: the scenario must write vpp (Megatron's virtual pipeline size)."""
    activation_offload: Optional[Sourced] = None
    """How the framework offloads activations to host memory (`OFFLOAD_SCHEMES`); null: it cannot (a scenario with
    `training.offload_layers` is refused)."""
    efficiency: dict[str, Sourced] = field(default_factory=dict)
    """`cluster.efficiency` key -> a number, or the name of a shared constant (`<library>.<key>`, resolved
    when the file is read: the value and both sources)."""
    selective_recompute: Optional[Sourced] = None
    """What `training.recompute: selective` means: `core_attn` (Megatron's selective recompute, its
    `recompute_modules`; null means this too), or `op` (torchtitan's op-level SAC, `plan/op_sac.py`)."""
    core_attn_checkpoints_flash: Optional[Sourced] = None
    """true: selective recompute's core_attn checkpoint wraps the attention whatever its kernel, so a FlashAttention
    forward re-runs in the backward too; null or false: only eager attention re-runs (`layer_ops.core_attn_reruns`)."""
    sp_with_tp: Optional[Sourced] = None
    """true: sequence parallelism comes with TP (`parallel.sp` follows tp > 1 unless the scenario sets it)."""
    tp_overlap: Optional[Sourced] = None
    """What `parallel.overlap_tp` overlaps (`TP_OVERLAPS`); null: `userbuffers`."""
    tp_wgrad_input: Optional[Sourced] = None
    """Where the column-parallel weight gradient's gathered input comes from (`TP_WGRAD_INPUTS`); null: `regather`."""
    fp8_output_layer: Optional[Sourced] = None
    """true: `training.precision: fp8` runs the output layer (LM head) in FP8 as well; null or false: it stays BF16."""
    fp8_tp_all_gather: Optional[Sourced] = None
    """true: under `training.precision: fp8` with tp > 1 the layers' TP all-gathers (the SP input of the column
    linears forward, the output gradient backward) carry FP8 tensors, 1 byte per element; reduce-scatters stay
    16-bit (`plan/float8_comm.py`); null or false: every TP collective is 16-bit."""
    mtp_from_config: Optional[Sourced] = None
    """false: the framework does not build the multi-token-prediction modules a model's config.json names
    (`num_nextn_predict_layers`) unless asked: a scenario whose `model` is a preset or a config file trains without
    MTP there, and one that writes `model.mtp_layers` in a mapping gets what it wrote; null or true: the config's
    depth stands."""
    grad_accum_cast: Optional[Sourced] = None
    """true: unfused accumulation of bf16 gradients into fp32 (`training.grad_accum_fused: false`, `grad_dtype:
    fp32`) first casts each micro-batch's gradient to an fp32 temporary, then adds it, after every micro-batch
    (DeepSpeed's BF16_Optimizer); null or false: one mixed-dtype add (`plan/layer_ops.grad_accum_ops`)."""
    optimizer_impl: Optional[Sourced] = None
    """How the framework steps Adam (`OPTIMIZER_IMPLS`): fused (one multi-tensor kernel), foreach or for_loop;
    null: PyTorch's default. Priced from a calibration profile's curve of that implementation where it has one."""
    pp_partitioned: Optional[Sourced] = None
    """true: with tp > 1 a pipeline send carries the TP rank's 1/t slice of the activation (or of its gradient), the
    receiver all-gathers it over TP before its forward (backward), and the sender all-gathers its own stored output
    back before that micro-batch's backward (DeepSpeed's pipe_partitioned / grad_partitioned); null or false: each
    TP rank sends the whole tensor (its 1/t with SP)."""
    expert_tp_follows_tp: Optional[Sourced] = None
    """true: with `parallel.etp` unset, an MoE layout with tp > 1 splits each routed expert over the TP ranks (`etp` =
    tp, set by `layout_rules`); null or false: etp unset keeps whole experts at every TP rank, the EP groups cut from
    dp x cp."""
    moe_host_sync: Optional[Sourced] = None
    """Where the framework's token-dropless MoE dispatch waits on the host for the GPU at every MoE layer's forward
    (`MOE_HOST_SYNCS`). Not priced: the report says so for a layout that does (`resolve.FrameworkChoice.notes`);
    null: not known to."""
    lacks: dict[str, Sourced] = field(default_factory=dict)
    """Parallel dimensions (`LACKABLE`) the framework does not have, each with the source that shows it (value:
    what the report says instead); a layout with that dimension above 1 is refused."""
    notes: list[str] = field(default_factory=list)
    """What the file knows the framework does and clustersim does not price yet, said in the report."""

    def option_choices(self, name: str) -> list:
        opt = self.options[name]
        return list(opt.choices) if opt.choices is not None else [True, False]


def _check(fw: Framework, where: str) -> Framework:
    """Cross-field checks of a framework file (a malformed shipped file is a bug the tests catch)."""
    if fw.pp_split.value not in PP_SPLITS:
        raise ScenarioError(f"{where}.pp_split", f"{fw.pp_split.value!r}", " | ".join(PP_SPLITS))
    if fw.fp8_recipe.value not in FP8_RECIPES:
        raise ScenarioError(f"{where}.fp8_recipe", f"{fw.fp8_recipe.value!r}", " | ".join(FP8_RECIPES))
    if fw.fp4_recipe is not None and fw.fp4_recipe.value not in FP4_RECIPES:
        raise ScenarioError(f"{where}.fp4_recipe", f"{fw.fp4_recipe.value!r}", " | ".join(FP4_RECIPES))
    if fw.selective_recompute is not None and fw.selective_recompute.value not in SELECTIVE_RECOMPUTES:
        raise ScenarioError(f"{where}.selective_recompute", f"{fw.selective_recompute.value!r}", " | ".join(SELECTIVE_RECOMPUTES))
    if fw.tp_overlap is not None and fw.tp_overlap.value not in TP_OVERLAPS:
        raise ScenarioError(f"{where}.tp_overlap", f"{fw.tp_overlap.value!r}", " | ".join(TP_OVERLAPS))
    for key in ("core_attn_checkpoints_flash", "fp8_output_layer", "fp8_tp_all_gather", "mtp_from_config", "grad_accum_cast", "pp_partitioned",
                "expert_tp_follows_tp"):
        entry = getattr(fw, key)
        if entry is not None and not isinstance(entry.value, bool):
            raise ScenarioError(f"{where}.{key}", f"{entry.value!r}", "true | false")
    if fw.multi_chunk_vpp is not None and (not isinstance(fw.multi_chunk_vpp.value, int) or fw.multi_chunk_vpp.value < 2):
        raise ScenarioError(f"{where}.multi_chunk_vpp", f"{fw.multi_chunk_vpp.value!r}", "an integer >= 2")
    if fw.activation_offload is not None and fw.activation_offload.value not in OFFLOAD_SCHEMES:
        raise ScenarioError(f"{where}.activation_offload", f"{fw.activation_offload.value!r}", " | ".join(OFFLOAD_SCHEMES))
    if fw.optimizer_impl is not None and fw.optimizer_impl.value not in OPTIMIZER_IMPLS:
        raise ScenarioError(f"{where}.optimizer_impl", f"{fw.optimizer_impl.value!r}", " | ".join(OPTIMIZER_IMPLS))
    if fw.moe_host_sync is not None and fw.moe_host_sync.value not in MOE_HOST_SYNCS:
        raise ScenarioError(f"{where}.moe_host_sync", f"{fw.moe_host_sync.value!r}", " | ".join(MOE_HOST_SYNCS))
    if fw.tp_wgrad_input is not None and fw.tp_wgrad_input.value not in TP_WGRAD_INPUTS:
        raise ScenarioError(f"{where}.tp_wgrad_input", f"{fw.tp_wgrad_input.value!r}", " | ".join(TP_WGRAD_INPUTS))
    if fw.attention_kernel.value not in ATTENTION_KERNELS:
        raise ScenarioError(f"{where}.attention_kernel", f"{fw.attention_kernel.value!r}", " | ".join(ATTENTION_KERNELS))
    for key in [*fw.defaults, *(o.sets for o in fw.options.values() if o.sets is not None)]:
        if key.split(".")[0] not in SETTABLE_SECTIONS or key.count(".") < 1:
            raise ScenarioError(f"{where}", f"sets {key!r}", f"a dotted key under {', '.join(SETTABLE_SECTIONS)}")
    for key in fw.lacks:
        if key not in LACKABLE:
            raise ScenarioError(f"{where}.lacks.{key}", "not a parallel dimension a framework may lack", " | ".join(LACKABLE))
    for n, o in fw.options.items():
        for other, _ in o.needs():
            if other not in fw.options:
                raise ScenarioError(f"{where}.options.{n}.requires", f"{other!r} is not an option", ", ".join(fw.options))
        for what, allowed in (("attention_kernel", ATTENTION_KERNELS), ("fp8_recipe", FP8_RECIPES),
                              ("activation_offload", OFFLOAD_SCHEMES)):
            picks = getattr(o, what)
            if picks is not None and not set(picks) <= set(fw.option_choices(n)):
                raise ScenarioError(f"{where}.options.{n}.{what}", f"names {sorted(picks)}",
                                    f"values of the option: {' | '.join(map(str, fw.option_choices(n)))}")
            bad = [v for v in (picks or {}).values() if v not in allowed]
            if bad:
                raise ScenarioError(f"{where}.options.{n}.{what}", f"{bad[0]!r}", " | ".join(allowed))
    for n, z in fw.zero.items():
        if n not in ("0", "1", "2", "3"):
            raise ScenarioError(f"{where}.zero.{n}", "not a ZeRO stage", "0 | 1 | 2 | 3")
    return fw


@dataclass(frozen=True, kw_only=True)
class KernelLibrary:
    """Constants of a kernel library that several frameworks run (`transformer_engine.yaml`)."""
    name: str
    title: str
    constants: dict[str, Sourced]
    """`cluster.efficiency` key -> its value for this library's kernels, with where it was fitted or read."""


@lru_cache(maxsize=None)
def shared_constants(library: str) -> dict[str, Sourced]:
    """The constants of kernel library `library` (`<library>.yaml` here), each a value with its source."""
    path = DIRECTORY / f"{library}.yaml"
    raw = read_yaml_file(path, f"constants file {path.name}")
    return from_mapping(KernelLibrary, raw, f"constants file {path.name}").constants


def _resolve_shared(fw: Framework, where: str) -> Framework:
    """`fw` with each efficiency entry that names a shared constant replaced by the constant's value, its
    source first and the framework's reason for using it after."""
    out = {}
    for key, entry in fw.efficiency.items():
        if isinstance(entry.value, str):
            library, _, name = entry.value.partition(".")
            table = shared_constants(library) if library in SHARED_CONSTANTS else {}
            if name not in table:
                raise ScenarioError(f"{where}.efficiency.{key}", f"{entry.value!r} is not a shared constant",
                                    ", ".join(f"{lib}.<key>" for lib in SHARED_CONSTANTS))
            const = table[name]
            entry = Sourced(value=const.value, source=f"{entry.value}: {const.source}. Here: {entry.source}")
        out[key] = entry
    return replace(fw, efficiency=out)


@lru_cache(maxsize=None)
def load_framework(name: str) -> Framework:
    """The framework file `<name>.yaml` shipped in this package."""
    if name not in FRAMEWORKS:
        raise ScenarioError("framework", f"{name!r} is not a framework clustersim prices", " | ".join(FRAMEWORKS))
    path = DIRECTORY / f"{name}.yaml"
    raw = read_yaml_file(path, f"framework file {path.name}")
    where = f"framework file {path.name}"
    return _check(_resolve_shared(from_mapping(Framework, raw, where), where), where)
