"""A scenario's `framework:` key, applied: which framework, its options, and the scenario keys it fixes.

Two steps, because a sweep changes the layout of a scenario already read:
1. `apply_framework(raw)`, on the scenario mapping before it is parsed: reads `framework:` (a name, or
   `{name: ..., <option>: ...}`), sets each option's scenario key (an option may also pick the attention kernel,
   `spec.Option.attention_kernel`, read by `FrameworkChoice.attention_kernel`), then the framework's `defaults` and
   `efficiency`, wherever the scenario does not say otherwise. A key the scenario sets and an option
   sets differently is an error (two answers to one question). Returns the mapping and a `FrameworkChoice`.
2. `layout_rules(choice, parallel, model)`, on every layout (`scenario.validate_layout`): what the layout's
   words mean in that framework: the parallel dimensions it lacks (refused above 1, `spec.Framework.lacks`),
   `parallel.zero` as the framework's sharding policy (`spec.ZeroMeaning`), FSDP's reshard default under
   pipelining, and the pipeline split (`pp_split.py`). It is idempotent, so a
   layout validated twice means the same thing.

Precedence, highest first: a key the scenario sets; an option given under `framework:`; the option's
default; the framework's `defaults`; the scenario dataclass's default.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ScenarioError
from ..inputs import short
from ..plan.schedules import INTERLEAVED, schedule_spec
from .pp_split import cost_balanced_layers, remainder_first_layers
from .spec import BLOCK_SCALED_RECIPES, DEFAULT_FRAMEWORK, FRAMEWORKS, POLICY_NAMES, Framework, load_framework

MAX_OPTION_NUMBER = 1e12
"""Largest numeric option (bucket sizes in elements: 10^12 is far above any model's parameters per rank)."""
STAGE_OF_POLICY = {name: i for i, name in enumerate(POLICY_NAMES)}
"""Sharding policy name -> the `parallel.zero` stage `plan/policy.py` prices it as."""


@dataclass(frozen=True)
class FrameworkChoice:
    """The framework a scenario is priced with, as resolved (`Scenario.framework`)."""
    name: str = DEFAULT_FRAMEWORK
    options: tuple[tuple[str, Any], ...] = ()
    """Every option of the framework with the value in force (given, or the framework's default)."""
    given: tuple[str, ...] = ()
    """The options the scenario wrote under `framework:`."""
    scenario_keys: frozenset = field(default_factory=frozenset)
    """Dotted keys the scenario set itself or through an option it gave (the framework's defaults and its
    per-stage rules leave them alone)."""
    asked_zero: int = 0
    """`parallel.zero` as the scenario wrote it (the report says what it meant here)."""

    @property
    def spec(self) -> Framework:
        return load_framework(self.name)

    @property
    def attention_kernel(self) -> str:
        """The family an option's value runs (`spec.Option.attention_kernel`), else the framework's."""
        return self._picked("attention_kernel")

    @property
    def fp8_recipe(self) -> str:
        """The FP8 casts an option's value runs (`spec.Option.fp8_recipe`), else the framework's."""
        return self._picked("fp8_recipe")

    @property
    def activation_offload(self) -> str | None:
        """How `training.offload_layers` is run (`spec.OFFLOAD_SCHEMES`): an option's pick, else the framework's; None
        where the framework cannot offload activations."""
        return self._picked("activation_offload")

    def linear_recipe(self, precision: str) -> str:
        """The casts the quantized linears run at `precision`: the framework's FP4 recipe under fp4 (`spec.FP4_RECIPES`;
        `hardware_rules` refuses fp4 where there is none), else its FP8 recipe."""
        if precision == "fp4":
            return self.spec.fp4_recipe.value
        return self.fp8_recipe

    def default_etp(self, moe, tp: int) -> int | None:
        """`parallel.etp` where the scenario leaves it unset: tp for an MoE model with tp > 1 under a framework that
        splits its experts over TP by default (`spec.Framework.expert_tp_follows_tp`), else None (whole experts)."""
        rule = self.spec.expert_tp_follows_tp
        return tp if rule is not None and rule.value and moe and tp > 1 else None

    def _picked(self, what: str) -> str:
        """`what` ('attention_kernel' | 'fp8_recipe' | 'activation_offload') as the first option whose value maps it
        says, else the file's (None where the file has no such entry)."""
        for name, opt in self.spec.options.items():
            picks = getattr(opt, what)
            if picks is not None and self.option(name) in picks:
                return picks[self.option(name)]
        entry = getattr(self.spec, what)
        return entry.value if entry is not None else None

    def option(self, name: str) -> Any:
        return dict(self.options).get(name)

    def zero_words(self, pp: int) -> tuple[int, ...]:
        """The `parallel.zero` values that mean a distinct policy in this framework at `pp` stages, the lowest
        word for each (Megatron: 0, 1, 3; its 2 is its 1): what a sweep tries."""
        seen = {}
        for word, z in sorted(self.spec.zero.items()):
            pol = _policy(z, pp)
            if pol is not None:
                seen.setdefault(pol, int(word))
        return tuple(sorted(seen.values()))

    def can_split(self, layers: int, pp: int, vpp: int) -> bool:
        """Whether this framework lays `layers` decoder layers over pp x vpp model chunks (`spec.pp_split`)."""
        rule = self.spec.pp_split.value
        if rule == "cost-balanced":
            return vpp == 1
        if rule == "remainder-first":
            return layers + 2 >= pp * vpp
        return layers % (pp * vpp) == 0

    def moe_host_sync(self, moe, ep: int) -> bool:
        """Whether this layout's MoE dispatch makes the host wait for the GPU at every MoE layer's forward
        (`spec.Framework.moe_host_sync`): an MoE model without a capacity factor (token-dropless, `model.moe`)
        under a framework whose dispatch does, at any ep (`dropless`) or with ep > 1 (`dropless_ep`)."""
        rule = self.spec.moe_host_sync
        if rule is None or moe is None or moe.capacity_factor is not None:
            return False
        return rule.value == "dropless" or ep > 1

    def notes(self, pp: int = 1, moe=None, ep: int = 1) -> list[str]:
        """What the report says about the framework's reading of this scenario (`pp`: its pipeline stages;
        `moe`, `ep`: its model's MoE spec and expert-parallel size)."""
        fw = self.spec
        out = []
        z = fw.zero.get(str(self.asked_zero))
        if z is not None:
            under = pp > 1 and z.policy_under_pp and z.note_under_pp
            note = z.note_under_pp if under else z.note
            if note:
                out.append(f"parallel.zero {self.asked_zero}: {note}")
        if self.moe_host_sync(moe, ep):
            out.append("token-dropless MoE dispatch (no model.moe.capacity_factor): the host waits for the GPU's "
                       "per-expert token counts at every MoE layer's forward, which is not priced; where the host "
                       "sets a layer's pace (small experts, short micro-batches) the step is slower than reported "
                       f"({fw.moe_host_sync.source})")
        return out + list(fw.notes)

    def to_json(self, pp: int = 1, attention_kernel: str | None = None, moe=None, ep: int = 1) -> dict:
        """The report's framework entry; `attention_kernel`: the one the run is priced with
        (`costs.priced_attention_kernel`), else the framework's; `moe`, `ep`: as `notes`."""
        return {"name": self.name, "title": self.spec.title,
                "options": [{"name": k, "value": v, "given": k in self.given} for k, v in self.options],
                "attention_kernel": attention_kernel or self.attention_kernel, "notes": self.notes(pp, moe, ep)}


def _policy(z, pp: int):
    """The policy a `ZeroMeaning` prices at `pp` stages; None where the framework has no such stage."""
    if z.only_under_pp and pp == 1:
        return None
    return (z.policy_under_pp if pp > 1 and z.policy_under_pp else z.policy)


def _split(raw_value) -> tuple[str, dict]:
    if raw_value is None:
        return DEFAULT_FRAMEWORK, {}
    if isinstance(raw_value, str):
        return raw_value, {}
    if isinstance(raw_value, dict):
        if "name" not in raw_value:
            raise ScenarioError("framework.name", "missing required key", " | ".join(FRAMEWORKS))
        name = raw_value["name"]
        if not isinstance(name, str):
            raise ScenarioError("framework.name", f"expected a string, got {short(name)}", " | ".join(FRAMEWORKS))
        return name, {k: v for k, v in raw_value.items() if k != "name"}
    raise ScenarioError("framework", f"expected a name or a mapping, got {short(raw_value)}",
                        f"{' | '.join(FRAMEWORKS)}, or {{name: ..., <option>: ...}}")


def _get(raw: dict, dotted: str, missing=KeyError) -> Any:
    node = raw
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return missing
        node = node[part]
    return node


def _put(raw: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = raw
    for part in parents:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ScenarioError(part, f"is {short(child)}, not a mapping")
        node = child
    node[last] = value


def _scenario_keys(raw: dict) -> frozenset:
    keys = set()
    for section in ("training", "parallel", "cluster"):
        value = raw.get(section)
        if isinstance(value, dict):
            keys.update(f"{section}.{k}" for k in value)
            eff = value.get("efficiency") if section == "cluster" else None
            if isinstance(eff, dict):
                keys.update(f"cluster.efficiency.{k}" for k in eff)
    return frozenset(keys)


def _same_meaning(fw: Framework, key: str, a: Any, b: Any) -> bool:
    """Whether two values of `key` mean the same in `fw` (Megatron's zero 1 and 2 are one policy)."""
    if key == "parallel.zero":
        za, zb = fw.zero.get(str(a)), fw.zero.get(str(b))
        return za is not None and zb is not None and za.policy == zb.policy
    return a == b


def apply_framework(raw: dict) -> tuple[dict, FrameworkChoice]:
    """Step 1 (module docstring): the scenario mapping with the framework's keys filled in, and the choice."""
    raw = copy.deepcopy(raw)
    name, given = _split(raw.pop("framework", None))
    fw = load_framework(name)
    user = _scenario_keys(raw)
    resolved = {}
    for opt_name, value in given.items():
        if opt_name not in fw.options:
            allowed = ", ".join(["name", *fw.options]) if fw.options else "name (this framework has no options)"
            raise ScenarioError(f"framework.{opt_name}", f"unknown option for {name}", allowed)
        if fw.options[opt_name].scale is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_OPTION_NUMBER:
                raise ScenarioError(f"framework.{opt_name}", f"{short(value)} is not allowed", f"a number in (0, {MAX_OPTION_NUMBER:g}]")
            continue
        choices = fw.option_choices(opt_name)
        if value not in choices or (isinstance(value, bool) != isinstance(choices[0], bool)):
            raise ScenarioError(f"framework.{opt_name}", f"{short(value)} is not allowed", " | ".join(map(str, choices)))
    for opt_name, opt in fw.options.items():
        value = given.get(opt_name, opt.default)
        resolved[opt_name] = value
        if value is None or opt.sets is None:
            continue
        target = opt.values.get(value, opt.values.get(str(value).lower())) if opt.values else value
        if target is None:  # a value the option's map leaves out sets nothing (torchtitan's mx: false)
            continue
        if opt.scale is not None:
            target = float(value) * opt.scale
        if opt.sets in user:
            if opt_name in given and not _same_meaning(fw, opt.sets, target, _get(raw, opt.sets)):
                raise ScenarioError(f"framework.{opt_name}", f"{short(value)} sets {opt.sets} to {short(target)} but the "
                                    f"scenario sets it to {short(_get(raw, opt.sets))}", "one of the two, or agreeing values")
            continue
        _put(raw, opt.sets, target)
    for opt_name, opt in fw.options.items():
        for other, want in opt.needs():
            if resolved[opt_name] is True and (resolved[other] is not want if isinstance(want, bool) else resolved[other] != want):
                said = str(want).lower() if isinstance(want, bool) else want
                raise ScenarioError(f"framework.{opt_name}", f"true under {name} needs {other} {said} "
                                    f"({opt.source})", f"{other}: {said} beside it, or {opt_name}: false")
    for key, entry in fw.defaults.items():
        if _get(raw, key) is KeyError:
            _put(raw, key, copy.deepcopy(entry.value))
    for key, entry in fw.efficiency.items():
        if _get(raw, f"cluster.efficiency.{key}") is KeyError:
            _put(raw, f"cluster.efficiency.{key}", entry.value)
    zero = _get(raw, "parallel.zero", 0)
    fixed = user | {fw.options[o].sets for o in given if fw.options[o].sets is not None}
    choice = FrameworkChoice(name=name, options=tuple(resolved.items()), given=tuple(given),
                             scenario_keys=frozenset(fixed), asked_zero=zero if isinstance(zero, int) and not isinstance(zero, bool) else 0)
    return raw, choice


def drop_options_setting(raw_framework, keys, keep: frozenset = frozenset()) -> Any:
    """`framework:` as written, less the options that set one of the dotted `keys`: a sweep's candidate
    layout says those keys itself (its `parallel.zero` replaces `distributed_optimizer`). Options named in `keep`
    stay (set on the same command line as the key: both are the last word, and must agree)."""
    if not isinstance(raw_framework, dict) or not isinstance(raw_framework.get("name"), str) \
            or raw_framework["name"] not in FRAMEWORKS:
        return raw_framework
    fw = load_framework(raw_framework["name"])
    return {k: v for k, v in raw_framework.items()
            if k == "name" or k in keep or k not in fw.options or fw.options[k].sets not in keys}


def layout_rules(choice: FrameworkChoice, parallel, model):
    """Step 2 (module docstring): `parallel` with the framework's meaning of its words; raises
    `ScenarioError` for a stage or split the framework does not have."""
    fw = choice.spec
    p = parallel
    for key, why in fw.lacks.items():
        size = getattr(p, key.split(".")[1])
        if size != 1:
            raise ScenarioError(key, f"{size} under framework {fw.name}: {why.value} ({why.source})", "1")
    meaning = fw.zero.get(str(p.zero))
    policy = _policy(meaning, p.pp) if meaning is not None else None
    if policy is None:
        have = ", ".join(f"{k} ({_policy(z, p.pp)})" for k, z in sorted(fw.zero.items()) if _policy(z, p.pp))
        why = f": {meaning.note}" if meaning is not None and meaning.note else ""
        raise ScenarioError("parallel.zero", f"{p.zero} under framework {fw.name} with pp {p.pp}{why}", have)
    p = replace(p, zero=STAGE_OF_POLICY[policy])
    if meaning.overlap_grad_sync is not None and "parallel.overlap_dp" not in choice.scenario_keys:
        p = replace(p, overlap_dp=meaning.overlap_grad_sync)
    if policy == "zero3" and meaning.reshard_after_forward is not None \
            and "parallel.reshard_after_forward" not in choice.scenario_keys:
        p = replace(p, reshard_after_forward=meaning.reshard_after_forward)
    if p.vpp > 1 and "parallel.pp_schedule" not in choice.scenario_keys and schedule_spec(p.pp_schedule).vpp == 1 \
            and schedule_spec(INTERLEAVED).framework_name(fw.name) is not None:
        # model chunks without a schedule: the framework's interleaved one (Megatron: virtual pipeline stages
        # select it, MLM core/pipeline_parallel/schedules.py get_forward_backward_func)
        p = replace(p, pp_schedule=INTERLEAVED)
    if "parallel.vpp" not in choice.scenario_keys:  # a multi-chunk schedule named without its chunk count
        fixed = schedule_spec(p.pp_schedule).vpp
        if fixed is None and fw.multi_chunk_vpp is not None:
            p = replace(p, vpp=fw.multi_chunk_vpp.value)  # the framework's default (torchtitan: 2 per rank)
        elif fixed not in (None, 1):
            p = replace(p, vpp=fixed)  # a V-shaped schedule's two chunks per rank (zbv, dualpipev)
    if p.pp_p2p == "blocking" and "parallel.pp_p2p" not in choice.scenario_keys \
            and not schedule_spec(p.pp_schedule).p2p_in_steady_state:
        p = replace(p, pp_p2p="async")  # a framework default the engine models for 1F1B only (see its notes)
    if p.etp is None:  # the experts split over the TP ranks unless the layout folds them (ep_spec.py)
        p = replace(p, etp=choice.default_etp(model.moe, p.tp))
    if fw.sp_with_tp is not None and fw.sp_with_tp.value and "parallel.sp" not in choice.scenario_keys:
        p = replace(p, sp=p.tp > 1)
    if fw.pp_split.value == "cost-balanced" and p.pp > 1 and "parallel.pp_layers" not in choice.scenario_keys:
        if p.vpp != 1:
            raise ScenarioError("parallel.vpp", f"{p.vpp} under framework {fw.name}", "1 (one model chunk per stage)")
        p = replace(p, pp_layers=cost_balanced_layers(model, p.pp))
    if fw.pp_split.value == "remainder-first" and p.pp > 1 and "parallel.pp_layers" not in choice.scenario_keys:
        chunks = p.pp * p.vpp
        if not choice.can_split(model.layers, p.pp, p.vpp):
            raise ScenarioError("parallel.pp", f"pp*vpp = {chunks} chunks for {model.layers} layers under framework {fw.name}",
                                f"at most layers + 2 = {model.layers + 2} chunks (the first and last stage hold the embedding and the output)")
        p = replace(p, pp_layers=remainder_first_layers(model.layers, chunks))
    return p


def hardware_rules(choice: FrameworkChoice, precision: str, gpus) -> None:
    """`ScenarioError` where one of the GPUs (the topology's and each pool's) cannot run the precision as the
    framework does: FP8 without FP8 tensor cores; a block-scaled FP8 recipe (`spec.BLOCK_SCALED_RECIPES`) without
    `mx_formats`; FP4 under a framework without an FP4 recipe (`spec.Framework.fp4_recipe`), or without FP4 tensor
    cores (an fp4 peak: Blackwell)."""
    if precision == "fp8":
        for gpu in gpus:
            _fp8_rules(choice, gpu)
    if precision == "fp4":
        if choice.spec.fp4_recipe is None:
            with_fp4 = [n for n in FRAMEWORKS if load_framework(n).fp4_recipe is not None]
            raise ScenarioError("training.precision", f"fp4 under framework {choice.name}, whose FP4 training is not "
                                "modelled", f"fp32 | bf16 | fp8, or fp4 under framework {' | '.join(with_fp4)}")
        for gpu in gpus:
            if "fp4" not in gpu.peak_tflops:
                raise ScenarioError("training.precision", f"fp4 but {gpu.name} has no FP4 tensor cores (no fp4 peak "
                                    "in its topology)", "fp32 | bf16 | fp8, or a topology whose gpu.peak_tflops has fp4 "
                                    "(Blackwell)")


def _fp8_rules(choice: FrameworkChoice, gpu) -> None:
    if "fp8" not in gpu.peak_tflops:
        raise ScenarioError("training.precision", f"fp8 but {gpu.name} has no FP8 tensor cores", "fp32 | bf16")
    if choice.fp8_recipe in BLOCK_SCALED_RECIPES and not gpu.mx_formats:
        key, word = next(((f"framework.{n}", f"{n} true" if choice.option(n) is True else choice.option(n))
                          for n, o in choice.spec.options.items()
                          if o.fp8_recipe and o.fp8_recipe.get(choice.option(n)) == choice.fp8_recipe),
                         ("framework.name", choice.name))
        raise ScenarioError(key, f"{word} scales FP8 in 32-value blocks, which {gpu.name} cannot (no MX formats; "
                            "Blackwell, compute capability 10.0, has them)",
                            "a per-tensor FP8 recipe, or a topology whose gpu has mx_formats: true")
