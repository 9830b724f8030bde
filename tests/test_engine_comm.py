"""Discrete-event engine: communication measured on the timeline (TP/SP, DP/ZeRO, PP, CP, EP), with an
alpha-beta stub cost model so the numbers do not move when the roofline model does."""
from dataclasses import replace

import pytest

from simulator.evaluate.analytic import estimate
from simulator.evaluate.engine import run_engine, simulate_engine
from simulator.errors import ScenarioError
from simulator.scenario import scenario_from_mapping
from test_engine import LAYER, CommCost, UniformCost, scenario


def run(sc, cost, **kw):
    return simulate_engine(sc, cost, **kw)


# ------------------------------------------------------------------------------- TP

@pytest.mark.parametrize("sp, recompute", [(False, "none"), (True, "none"), (True, "full"), (False, "selective")])
def test_tp_exposed_equals_tp_time_when_overlap_tp_is_off(sp, recompute):
    sc = scenario(pp=2, m=4, tp=4, sp=sp)
    sc = replace(sc, training=replace(sc.training, recompute=recompute))
    r = run(sc, CommCost(sc.topology, dims=("tp",)))
    tp_time, tp_exposed = r.comm["tp"]
    assert tp_time > 0
    assert tp_exposed == pytest.approx(tp_time, rel=1e-9)
    assert r.overlap_fraction == pytest.approx(0.0, abs=1e-9)


class SpreadCost(CommCost):
    """Every GEMM (forward, dgrad, wgrad) takes LAYER/4: compute to hide communication behind."""

    def compute_time(self, op):
        return LAYER / 4 if op.kind == "gemm" else 0.0


# overlap_tp: tests/test_tp_overlap.py


# ------------------------------------------------------------------------------- DP / ZeRO

@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_dp_comm_is_hidden_with_overlap_and_a_long_backward(zero):
    """Buckets are released as each layer's weight gradients complete and reduced under the rest of the
    backward; only what the last layer and the embedding release is left after it (MEG-DDP), plus with
    ZeRO-1/2 the first parameter bucket and with ZeRO-3 each pass's first gather (nothing to prefetch
    behind). This toy model's embedding is 0.4 of a layer, 8 layers per stage."""
    layers = 16
    sc = scenario(pp=2, m=4, dp=4, zero=zero, overlap_dp=True, dp_bucket_mb=0.25, layers=layers)
    cost = CommCost(sc.topology, dims=("dp",))
    r = run(sc, cost)
    dp_time, dp_exposed = r.comm["dp"]
    assert dp_time > 0
    assert dp_exposed < 0.25 * dp_time
    if zero < 3:  # ZeRO-3's per-layer waits on other stages also reach the critical rank, as bubble
        free = run(sc, UniformCost(topology=sc.topology))
        assert r.iteration_time_s == pytest.approx(free.iteration_time_s + dp_exposed, rel=1e-9)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_dp_comm_is_fully_exposed_without_overlap(zero):
    sc = scenario(pp=2, m=4, dp=4, zero=zero, overlap_dp=False, dp_bucket_mb=0.25)
    r = run(sc, CommCost(sc.topology, dims=("dp",)))
    dp_time, dp_exposed = r.comm["dp"]
    assert dp_time > 0
    assert dp_exposed == pytest.approx(dp_time, rel=1e-9)
    hidden = run(scenario(pp=2, m=4, dp=4, zero=zero, overlap_dp=True, dp_bucket_mb=0.25),
                 CommCost(sc.topology, dims=("dp",)))
    assert hidden.iteration_time_s < r.iteration_time_s


@pytest.mark.parametrize("estimator", ["engine", "engine-full", "engine-alone", "analytic"])
@pytest.mark.parametrize("pp", [1, 2])
def test_overlapped_gradient_buckets_slow_the_backward_by_the_sm_share(estimator, pp):
    """NCCL's kernels take a share s of the SMs (`cluster.efficiency.comm_sm_share`) while the ZeRO-0
    buckets are all-reduced under the last backward, so that backward runs at 1 - s while they are in flight:
    the step grows by s times the DP time beside it, at most all of it on each stage the last micro-batch's
    backward crosses (less the buckets released after the pass; the same with every rank simulated and
    without link sharing). On one stage the growth is exposed DP time."""
    sc = scenario(pp=pp, m=8, dp=4, zero=0, overlap_dp=True, dp_bucket_mb=0.25, layers=16)
    share = 0.3

    def price(s):
        cost = CommCost(sc.topology, dims=("dp",))
        cost.efficiency = {"comm_sm_share": s}
        if estimator == "analytic":
            r = estimate(sc, cost)
        else:
            r = run(sc, cost, full=estimator == "engine-full", contention=estimator != "engine-alone")
        dp = r.comm["dp"]
        return r.iteration_time_s, *((dp["time_s"], dp["exposed_s"]) if isinstance(dp, dict) else dp)

    (t0, dp0, exp0), (t, dp, exp) = price(0.0), price(share)
    assert dp == pytest.approx(dp0, rel=1e-3)  # the same collectives (the critical stage may change)
    grew = t - t0
    assert 0.5 * share * dp < grew <= share * dp * pp * (1 + 1e-3)
    if pp == 1:
        assert exp - exp0 == pytest.approx(grew, rel=1e-6)


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1"])
def test_zero3_adds_two_gathers_and_a_reduce_scatter_per_layer_per_micro_batch(schedule):
    pp, m, layers = 4, 6, 8
    sc = scenario(pp=pp, m=m, dp=2, zero=3, layers=layers, schedule=schedule)
    r = run(sc, CommCost(sc.topology, dims=("dp",)))
    middle = r.stages[1]  # no embedding or head: layers only
    assert middle.comm_count["dp"] == m * (layers // pp) * 3
    z1 = run(scenario(pp=pp, m=m, dp=2, zero=1, layers=layers), CommCost(sc.topology, dims=("dp",)))
    assert r.stages[1].comm["dp"][0] > 2 * z1.stages[1].comm["dp"][0]


def test_zero2_reduce_scatters_every_micro_batch_zero1_only_the_last():
    sc1 = scenario(pp=2, m=4, dp=2, zero=1, dp_bucket_mb=0.5)
    sc2 = scenario(pp=2, m=4, dp=2, zero=2, dp_bucket_mb=0.5)
    cost = CommCost(sc1.topology, dims=("dp",))
    eng1, _ = run_engine(sc1, cost)
    eng2, _ = run_engine(sc2, cost)
    for a, b in zip(eng1.ranks, eng2.ranks):
        rs1 = sum(1 for c, _ in a.rec.colls if "reduce_scatter" in c.label)
        rs2 = sum(1 for c, _ in b.rec.colls if "reduce_scatter" in c.label)
        ag1 = sum(1 for c, _ in a.rec.colls if "all_gather" in c.label)
        assert rs1 > 0 and rs2 == 4 * rs1
        assert ag1 > 0


def test_zero1_parameter_gather_gates_the_first_forward():
    """Steady state: the all-gather of the updated parameters is issued at step start and the first
    forward of each chunk waits for its bucket (Megatron --overlap-param-gather)."""
    sc = scenario(pp=1, m=2, dp=4, zero=1, dp_bucket_mb=1000)
    cost = CommCost(sc.topology, dims=("dp",), bw=1e9)
    eng, _ = run_engine(sc, cost)
    rk = eng.ranks[0]
    gather = next(c for c, label in rk.rec.colls if "param" in label)
    first_pass_start = rk.rec.passes[0][0]
    assert gather.start == 0.0
    assert first_pass_start >= gather.end or any(s.start >= gather.end for s in rk.rec.passes[0][4] or ())


def test_zero1_whole_gather_is_one_exposed_all_gather_after_the_optimizer():
    """nanotron (`zero_gather: whole`): one all-gather of every updated parameter after the optimizer
    step, however small the buckets, and nothing hides it: it is exposed in full and ends no later than
    the step."""
    sc = scenario(pp=1, m=2, dp=4, zero=1, dp_bucket_mb=0.25)
    whole = replace(sc, parallel=replace(sc.parallel, zero_gather="whole"))
    cost = CommCost(sc.topology, dims=("dp",), bw=1e9)
    eng_b, _ = run_engine(sc, cost)
    eng_w, _ = run_engine(whole, cost)
    gathers_b = [c for c, label in eng_b.ranks[0].rec.colls if "param" in label]
    gathers_w = [c for c, label in eng_w.ranks[0].rec.colls if "param" in label]
    assert len(gathers_b) > 1 and len(gathers_w) == 1
    g = gathers_w[0]
    opt_end = eng_w.ranks[0].rec.optimizer[-1][1]
    assert g.start == pytest.approx(opt_end)
    r = run(whole, cost)
    no_gather = run(replace(sc, parallel=replace(sc.parallel, zero=0)), cost)  # same passes, all-reduce grads
    assert r.iteration_time_s >= g.end - 1e-12
    assert r.comm["dp"][1] >= g.end - g.start - 1e-12
    assert r.iteration_time_s > no_gather.iteration_time_s


class SPNormCost(CommCost):
    """Only SP's norm-gradient all-reduce costs anything (alpha + bytes / bw); compute as UniformCost."""

    def comm_time(self, op, group):
        return self.alpha + op.bytes / self.bw if op.name == "sp_norm_grad_allreduce" and group.size > 1 else 0.0


def _tp_comm(r) -> tuple[float, float]:
    c = r.comm["tp"]
    return (c["time_s"], c["exposed_s"]) if isinstance(c, dict) else tuple(c)


@pytest.mark.parametrize("estimator", ["engine", "analytic"])
@pytest.mark.parametrize("pp", [1, 2])
def test_sp_all_reduces_the_norm_gradients_over_tp_once_per_step(estimator, pp):
    """Megatron's _allreduce_layernorm_grads / nanotron's tied-parameter sync: with SP the norm weights'
    gradients are summed over TP once per step, exposed, sized by the stage's norm weights (two per layer;
    the head stage adds the final norm); without SP nothing is added."""
    from simulator.evaluate.analytic import estimate
    sp = scenario(pp=pp, m=4, tp=4, sp=True)
    no_sp = replace(sp, parallel=replace(sp.parallel, sp=False))
    cost = SPNormCost(sp.topology, bw=1e6, alpha=1e-3)
    price = (lambda sc: run(sc, cost)) if estimator == "engine" else (lambda sc: estimate(sc, cost))
    r, base = price(sp), price(no_sp)
    h, layers_per_stage = 256, 2
    stage = [cost.alpha + (2 * layers_per_stage + (s == pp - 1)) * h * sp.training.grad_bytes / cost.bw for s in range(pp)]
    grown = r.iteration_time_s - base.iteration_time_s
    assert _tp_comm(base)[0] == 0.0
    if pp == 1:
        assert _tp_comm(r) == pytest.approx((stage[0], stage[0]), rel=1e-9)
        assert grown == pytest.approx(stage[0], rel=1e-9)
    else:  # the step grows by at most the larger stage's all-reduce, at least the smaller one's minus a pass
        assert min(stage) - LAYER <= grown <= max(stage) + 1e-12


def test_sp_norm_all_reduce_is_on_the_tp_thread_of_the_trace(tmp_path):
    import json
    sc = scenario(pp=2, m=4, tp=4, sp=True)
    run(sc, SPNormCost(sc.topology, bw=1e6, alpha=1e-3), trace_path=tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    slices = [e for e in events if e.get("name") == "sp norm grads all_reduce"]
    assert len(slices) == 2 and all(e["cat"] == "tp" and e["tid"] == 2 for e in slices)


def test_tied_embeddings_all_reduce_between_first_and_last_stage():
    raw = {"name": "tied", "model": {"arch": "llama", "layers": 4, "hidden": 256, "ffn_hidden": 512, "heads": 4,
                                     "vocab": 1000, "tie_embeddings": True},
           "training": {"seq_len": 128, "global_batch": 4},
           "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus_per_node": 4},
           "parallel": {"pp": 4, "dp": 1}}
    sc = scenario_from_mapping(raw)
    cost = CommCost(sc.topology, dims=("dp",))
    eng, _ = run_engine(sc, cost)
    tied = [[c for c, label in rk.rec.colls if "tied" in label] for rk in eng.ranks]
    assert [len(t) for t in tied] == [1, 0, 0, 1]
    assert tied[0][0] is tied[3][0]  # one rendezvous of the two stages
    assert tied[0][0].start >= max(eng.ranks[0].compute_s, eng.ranks[3].compute_s) - 1e-12
    full = run(sc, cost, full=True)
    assert full.iteration_time_s == pytest.approx(run(sc, cost).iteration_time_s)


# ------------------------------------------------------------------------------- PP, CP, EP

def test_pp_transfers_delay_the_step_and_are_exposed_on_the_critical_path():
    pp, m = 4, 8
    sc = scenario(pp=pp, m=m)
    free = run(sc, UniformCost(topology=sc.topology))
    cost = CommCost(sc.topology, dims=("pp",), bw=1e9)
    r = run(sc, cost)
    hop = cost.alpha + 128 * 256 * 2 / cost.bw
    assert r.iteration_time_s >= free.iteration_time_s + 2 * (pp - 1) * hop - 1e-12
    assert r.comm["pp"][0] == pytest.approx(2 * m * hop)  # stage 0: sends activations, receives gradients
    assert r.comm["pp"][1] > 0


class SendCost(CommCost):
    """CommCost on PP only, with the analytic estimator's p2p priced by the same alpha-beta."""

    def __init__(self, topology, alpha):
        super().__init__(topology, dims=("pp",), bw=1e12, alpha=alpha)

    def p2p_time(self, nbytes, same_node):
        return self.alpha + nbytes / self.bw


@pytest.mark.parametrize("pp, m", [(2, 8), (4, 8), (4, 16), (8, 32)])
def test_blocking_sends_cost_two_per_neighbour_and_micro_batch_async_one(pp, m):
    """1F1B with sends of c = one layer's pass (a stage: 6 c per micro-batch): blocking (nanotron) pays each
    micro-batch's sends one after the other, 2 per neighbour (4 on an interior stage), async 1 per
    neighbour. Engine and analytic agree within 6 %; the blocking step is longer by (m - 1) x c per
    neighbour of an interior stage or a little more; with pp = 2 the engine gives the closed form exactly."""
    c = LAYER
    neighbours = 2 if pp > 2 else 1
    base = scenario(pp=pp, m=m)
    free = run(base, UniformCost(topology=base.topology)).iteration_time_s
    steps, pp_comm = {}, {}
    for mode in ("async", "blocking"):
        sc = scenario(pp=pp, m=m, pp_p2p=mode)
        cost = SendCost(sc.topology, alpha=c)
        r = run(sc, cost)
        steps[mode], pp_comm[mode] = r.iteration_time_s, r.comm["pp"]
        assert steps[mode] == pytest.approx(estimate(sc, cost).iteration_time_s, rel=0.06)
    assert pp_comm["blocking"][1] == pytest.approx(pp_comm["blocking"][0])  # a held rank's sends are all exposed
    assert pp_comm["async"][1] < pp_comm["async"][0]
    assert (m - 1) * neighbours * c <= steps["blocking"] - steps["async"] <= 1.2 * (m - 1) * neighbours * c
    if pp == 2:
        assert steps["blocking"] == pytest.approx(free + 2 * (m - 1) * c + 2 * (pp - 1) * c, rel=1e-4)  # + bytes / bw


def test_blocking_sends_are_modelled_for_1f1b_only():
    with pytest.raises(ScenarioError, match="parallel.pp_p2p"):
        scenario(pp=4, m=8, schedule="interleaved-1f1b", vpp=2, pp_p2p="blocking")


def test_cp_ring_and_allgather_communicate_on_the_cp_stream():
    for cp_comm in ("ring", "allgather"):
        sc = scenario(pp=2, m=2, cp=2, cp_comm=cp_comm)
        r = run(sc, CommCost(sc.topology, dims=("cp",)))
        assert r.comm["cp"][0] > 0 and r.comm["cp"][1] <= r.comm["cp"][0] + 1e-12


def test_ep_all_to_alls_are_exposed_when_blocking():
    raw = {"name": "moe", "model": {"arch": "llama", "layers": 4, "hidden": 256, "ffn_hidden": 512, "heads": 4,
                                    "vocab": 1000, "moe": {"experts": 4, "top_k": 2, "expert_ffn_hidden": 256}},
           "training": {"seq_len": 128, "global_batch": 8},
           "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus_per_node": 8},
           "parallel": {"pp": 2, "dp": 4, "ep": 2, "zero": 1}}
    sc = scenario_from_mapping(raw)
    cost = CommCost(sc.topology, dims=("ep", "dp"))
    r = run(sc, cost)
    assert r.comm["ep"][0] > 0
    assert r.comm["ep"][1] == pytest.approx(r.comm["ep"][0], rel=1e-9)
    full = run(sc, cost, full=True)
    assert full.iteration_time_s == pytest.approx(r.iteration_time_s, rel=1e-12)


@pytest.mark.parametrize("model, parallel", [
    ({"arch": "llama", "layers": 4, "hidden": 256, "ffn_hidden": 512, "heads": 8, "kv_heads": 2, "vocab": 1000,
      "tie_embeddings": True}, {"pp": 2, "tp": 4, "dp": 1}),
    ({"arch": "gpt", "layers": 4, "hidden": 256, "ffn_hidden": 1024, "heads": 4, "vocab": 1000, "positions": 128},
     {"pp": 1, "tp": 2, "dp": 4}),
    ({"arch": "llama", "layers": 4, "hidden": 256, "ffn_hidden": 512, "heads": 4, "vocab": 1000,
      "moe": {"experts": 4, "top_k": 2, "expert_ffn_hidden": 256, "dense_layers": 1}}, {"pp": 2, "dp": 4, "ep": 2}),
])
def test_block_parameters_add_up_to_ops_rank_params(model, parallel):
    """The engine's per-block (layer, embedding, head) split of DP traffic covers exactly ops.rank_params."""
    from simulator.plan.sharded_params import rank_params
    gpus = parallel["pp"] * parallel.get("tp", 1) * parallel["dp"]
    sc = scenario_from_mapping({"name": "p", "model": model, "training": {"seq_len": 128, "global_batch": 8},
                                "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus_per_node": gpus},
                                "parallel": parallel})
    eng, _ = run_engine(sc, UniformCost(topology=sc.topology))
    for st in eng.plan.stages:
        rp = rank_params(sc, st.stage)
        blocks = [b for c in st.chunks for b in eng.plan.blocks[(c, "F")]]
        assert sum(b.params_dense for b in blocks) == pytest.approx(rp.dense)
        assert sum(b.params_expert for b in blocks) == pytest.approx(rp.expert)


@pytest.mark.parametrize("estimator", ["engine", "analytic"])
@pytest.mark.parametrize("bw", [1e11, 1e8])  # collective shorter than a GEMM, then longer
def test_tp_linear_async_hides_the_column_linears_backward_collectives_under_their_gemms(estimator, bw):
    """Megatron / nanotron async column linear: the SP input's re-gather runs under the dgrad GEMM and the
    dgrad's reduce-scatter under the wgrad GEMM, so each column linear's backward takes 2 max(c, g) instead
    of 2 (c + g): the step shrinks by 2 min(c, g) per column linear (QKV, FC1), layer and micro-batch. The
    same collectives run either way."""
    from simulator.evaluate.analytic import estimate
    m, layers = 4, 4
    off = _tp_across_nodes(m=m, layers=layers)
    on = replace(off, parallel=replace(off.parallel, tp_linear_async=True))
    cost = SpreadCost(off.topology, dims=("tp",), bw=bw)
    price = (lambda sc: run(sc, cost)) if estimator == "engine" else (lambda sc: estimate(sc, cost))
    r_on, r_off = price(on), price(off)
    c = cost.alpha + 128 * 256 * 2 / bw  # one micro-batch's activations, seq 128 x hidden 256, bf16
    g = LAYER / 4
    assert _tp_comm(r_on)[0] == pytest.approx(_tp_comm(r_off)[0], rel=1e-9)
    saved = r_off.iteration_time_s - r_on.iteration_time_s
    assert saved == pytest.approx(m * layers * 2 * 2 * min(c, g), rel=1e-6)
    assert _tp_comm(r_off)[0] - _tp_comm(r_off)[1] == pytest.approx(0.0, abs=1e-12)  # all exposed when off


@pytest.mark.parametrize("estimator", ["engine", "analytic"])
@pytest.mark.parametrize("share", [0.0, 0.3])
def test_async_linear_slows_its_gemms_by_the_sm_share(estimator, share):
    """The async column linear hides its collectives, but NCCL's kernels take a share s of the SMs
    (`cluster.efficiency.comm_sm_share`), inside a node and across: a GEMM g beside a shorter collective
    c runs g + s c, so each column linear's backward saves 2 (1 - s) c over running them one after the
    other, per layer and micro-batch (QKV and FC1)."""
    m, layers = 4, 4
    off = scenario(pp=1, m=m, tp=4, sp=True, layers=layers)
    on = replace(off, parallel=replace(off.parallel, tp_linear_async=True))
    cost = SpreadCost(off.topology, dims=("tp",), bw=1e11)  # collective shorter than a GEMM
    cost.efficiency = {"comm_sm_share": share}
    price = (lambda sc: run(sc, cost)) if estimator == "engine" else (lambda sc: estimate(sc, cost))
    c = cost.alpha + 128 * 256 * 2 / cost.bw
    assert c < LAYER / 4
    saved = price(off).iteration_time_s - price(on).iteration_time_s
    assert saved == pytest.approx(m * layers * 2 * 2 * (1 - share) * c, rel=1e-6)
    across = _tp_across_nodes(m=m, layers=layers)
    across_on = replace(across, parallel=replace(across.parallel, tp_linear_async=True))
    c = cost.alpha + 128 * 256 * 2 / cost.bw
    assert price(across).iteration_time_s - price(across_on).iteration_time_s == pytest.approx(
        m * layers * 2 * 2 * (1 - share) * c, rel=1e-6)


def _tp_across_nodes(m: int, layers: int, pp: int = 1, **parallel):
    """tp = 4 over two nodes of two GPUs (x pp)."""
    raw = {"name": "tp over nodes", "model": {"arch": "llama", "layers": layers, "hidden": 256, "ffn_hidden": 512,
                                              "heads": 4, "vocab": 1000},
           "training": {"seq_len": 128, "global_batch": m},
           "cluster": {"topology": "dgx-h100", "nodes": 2 * pp, "gpus_per_node": 2},
           "parallel": {"pp": pp, "dp": 1, "tp": 4, "sp": True, "tp_linear_async": False, **parallel}}
    return scenario_from_mapping(raw)


@pytest.mark.parametrize("estimator", ["engine", "analytic"])
@pytest.mark.parametrize("bw", [1e11, 1e8])
def test_without_sp_the_async_linear_hides_its_dgrad_all_reduce_under_its_wgrad(estimator, bw):
    """No SP: nothing to re-gather, and the column linear's dgrad all-reduce runs under its wgrad GEMM
    (Megatron-Core layers.py:696, Transformer Engine linear.py:752): one collective per column linear, so the step
    shrinks by min(c, g) per column linear (QKV, FC1), layer and micro-batch."""
    m, layers = 4, 4
    off = _tp_across_nodes(m=m, layers=layers, sp=False)
    on = replace(off, parallel=replace(off.parallel, tp_linear_async=True))
    cost = SpreadCost(off.topology, dims=("tp",), bw=bw)
    price = (lambda sc: run(sc, cost)) if estimator == "engine" else (lambda sc: estimate(sc, cost))
    r_on, r_off = price(on), price(off)
    c = cost.alpha + 128 * 256 * 2 / bw
    assert _tp_comm(r_on)[0] == pytest.approx(_tp_comm(r_off)[0], rel=1e-9)
    assert r_off.iteration_time_s - r_on.iteration_time_s == pytest.approx(m * layers * 2 * min(c, LAYER / 4), rel=1e-6)


@pytest.mark.parametrize("changes", [{"pp_schedule": "zb-h1"}, {"overlap_tp": True}])
def test_tp_linear_async_applies_only_with_fused_weight_gradients_and_without_overlap_tp(changes):
    """A split-backward schedule (the wgrad GEMMs leave the backward) or overlap_tp (which hides every TP
    collective already): the key changes nothing."""
    pp = 2 if changes.get("pp_schedule") else 1
    base = _tp_across_nodes(m=4, layers=4, pp=pp)
    base = replace(base, parallel=replace(base.parallel, **changes))
    on = replace(base, parallel=replace(base.parallel, tp_linear_async=True))
    cost = SpreadCost(base.topology, dims=("tp",), bw=1e8)
    assert run(on, cost).iteration_time_s == run(base, cost).iteration_time_s
