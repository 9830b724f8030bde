"""The terminal report: the `run --json` dict as tables a person can scan."""
from __future__ import annotations


def _fmt_s(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"


def _table(rows: list[list[str]], header: list[str], align: str | None = None) -> list[str]:
    cols = list(zip(*([header] + rows))) if rows else [[h] for h in header]
    widths = [max(len(str(c)) for c in col) for col in cols]
    align = align or ("l" + "r" * (len(header) - 1))
    def line(cells):
        return "  ".join(str(c).ljust(w) if a == "l" else str(c).rjust(w) for c, w, a in zip(cells, widths, align))
    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]


def memory_verdict(mem: dict) -> str:
    """A report's (or a pool's) memory verdict as printed: fits, TIGHT or DOES NOT FIT (`memory_fit.VERDICTS`)."""
    return mem["verdict"] if mem["verdict"] == "fits" else mem["verdict"].upper()


def format_report(r: dict) -> str:
    lay = r["layout"]
    out = [f"{r['name']}", ""]
    out.append(f"  {r['gpus']} GPUs   dp {lay['dp']}  tp {lay['tp']}{' +sp' if lay['sp'] else ''}  pp {lay['pp']}"
               f" ({lay['pp_schedule']}{', vpp ' + str(lay['vpp']) if lay['vpp'] > 1 else ''})  cp {lay['cp']}  ep {lay['ep']}"
               f"{' (etp ' + str(lay['etp']) + ')' if lay.get('etp') else ''}{' +a2a overlap' if lay.get('ep_overlap') else ''}"
               f"  zero {lay['zero']}   micro-batch {lay['micro_batch']} x {lay['micro_batches']}   recompute {lay['recompute']}")
    m = r["model"]
    out.append(f"  model {m['name']}: {m['params'] / 1e9:.2f} B params"
               + (f" ({m['active_params'] / 1e9:.2f} B active)" if m['active_params'] != m['params'] else ""))
    out.append("")
    rows = [
        ["iteration time", _fmt_s(r["iteration_time_s"])],
        ["tokens/s", f"{r['tokens_per_s']:,.0f}"],
        ["tokens/s per GPU", f"{r['tokens_per_s_per_gpu']:,.1f}"],
        ["model TFLOP/s per GPU", f"{r['model_tflops_per_gpu']:.1f}"],
        ["MFU", f"{r['mfu'] * 100:.1f} %"],
        ["bubble (critical stage)", f"{r['bubble_fraction'] * 100:.1f} %"],
        ["comm hidden by compute", f"{r['overlap_fraction'] * 100:.1f} %"],
    ]
    if r.get("hfu"):
        rows.insert(5, ["HFU", f"{r['hfu'] * 100:.1f} %"])
    out += ["  " + x for x in _table(rows, ["step", "value"])]
    out.append("")
    crows = [[d, _fmt_s(v["time_s"]), _fmt_s(v["exposed_s"]),
              f"{v['exposed_s'] / r['iteration_time_s'] * 100:.1f} %"] for d, v in r["comm"].items() if v["time_s"] > 0]
    if crows:
        out += ["  " + x for x in _table(crows, ["communication", "time", "exposed", "of step"])]
        out.append("")
    b = r.get("breakdown") or {}
    if b:
        brows = [[k.replace("_s", "").replace("_", " "), _fmt_s(v), f"{v / r['iteration_time_s'] * 100:.1f} %"]
                 for k, v in b.items() if v > 0]
        out += ["  " + x for x in _table(brows, ["where the time goes", "time", "of step"])]
        out.append("")
    mem = r["memory"]
    mrows = [[str(s["stage"]), f"{s['weights_gib']:.2f}", f"{s['grads_gib']:.2f}", f"{s['optimizer_gib']:.2f}",
              f"{s['activations_gib']:.2f}", f"{s['buffers_gib']:.2f}", f"{s['peak_gib']:.2f}"] for s in mem["per_stage"]]
    heads = ["stage", "weights", "grads", "optimizer", "activations", "buffers", "peak GiB"]
    idle = r.get("stage_idle_fraction") or []
    if len(idle) == len(mrows) > 1:  # a pipeline: each stage's idle share (the critical stage's is the bubble above)
        mrows = [row + [f"{x * 100:.1f} %"] for row, x in zip(mrows, idle)]
        heads.append("idle")
    out += ["  " + x for x in _table(mrows, heads)]
    free = mem["capacity_gib"] - mem["peak_gib"]
    out.append(f"  memory: peak {mem['peak_gib']:.1f} GiB of {mem['capacity_gib']:.1f} GiB, {free:.1f} GiB free"
               f" (fits needs {mem.get('headroom_gib', 0.0):.1f} free) -> {memory_verdict(mem)}"
               f" ({mem['peak_gib'] / mem['capacity_gib'] * 100:.0f} % of capacity)")
    if mem["verdict"] == "tight":
        out.append("  (tight: under the GPU's memory but inside the headroom kept for the memory model's own error;"
                   " it may or may not fit)")
    out.append("")
    prof = r["profile"]
    src = f"a roofline over {prof.get('kernels', 'spec-based constants')}" if prof["source"] == "default" \
        else f"profile {prof['source']}"
    out.append(f"  numbers from the {r['estimator']} estimator, costs from {src}"
               + (f" ({prof['measured_compute_fraction'] * 100:.0f} % of compute time measured)" if prof["source"] != "default" else ""))
    dl = r.get("diloco")
    if dl:
        out.append(f"  DiLoCo over {dl['sites']} sites: inner step {_fmt_s(dl['inner_step_s'])}, outer all-reduce "
                   f"{_fmt_s(dl['outer_sync_s'])} ({dl['compression']}{', overlapped' if dl['overlap'] else ''}) every "
                   f"{dl['outer_every']} steps: WAN {dl['wan_share'] * 100:.2f} % of the step")
    st = r.get("stragglers")
    if st and st["slow_gpus"]:
        worst = max(st["pacing"], key=lambda x: x["slowdown"])
        out.append(f"  stragglers: {st['slow_gpus']} slow GPU(s); rank {worst['rank']} ({worst['slowdown']:.2f}x) sets the pace of "
                   f"stage {worst['stage']}; {len(st['pacing'])} of {lay['pp']} stage(s) paced by a slow GPU; "
                   f"+{_fmt_s(st['cost_s'])} per step over the homogeneous {_fmt_s(st['homogeneous_step_s'])}")
    dl = r.get("degraded_links")
    if dl:
        each = "; ".join(f"node {x['node']} {x['link']} at {x['bandwidth']:.0%} crossed by "
                         f"{', '.join(x['groups']) or 'no group'}" + (f" of stage(s) {', '.join(map(str, x['stages']))}"
                                                                     if x["stages"] else "") for x in dl["links"])
        out.append(f"  degraded links: {each}; +{_fmt_s(dl['cost_s'])} per step over the healthy {_fmt_s(dl['healthy_step_s'])}")
    pl = r.get("pools")
    if pl:
        parts = [f"{p['gpu']} x{p['nodes']} node(s) stages {','.join(map(str, p['stages']))} "
                 f"{p['peak_gib']:.1f}/{p['capacity_gib']:.0f} GiB {memory_verdict(p)}" for p in pl["pools"]]
        out.append(f"  pools: {'; '.join(parts)}; layers per stage {pl['pp_layers']} ({pl['pp_balance']} balance)")
        if pl.get("dp_shares"):
            out.append("  DP shares by speed: " + "; ".join(
                f"{d['gpu']} {d['replicas']} replica(s) x {d['micro_batches']} micro-batches"
                + (f" ({d['fewer']} with one fewer)" if d["fewer"] else "") for d in pl["dp_shares"]))
    att = r.get("attention")
    if att and (att["mask"] == "document" or att.get("sliding_window") is not None):
        cp = (f"; busiest CP rank {att['cp_busiest_vs_causal']:.2f}x the causal mask's share ({att['cp_balance']})"
              if lay["cp"] > 1 else "")
        masks = []
        if att["mask"] == "document":
            masks.append(f"document mask (token-weighted document piece {att['mean_piece_tokens']:,.0f} tokens)")
        if att.get("sliding_window") is not None:
            masks.append(f"sliding window {att['sliding_window']:,} tokens on {att['sliding_layers']} layer(s)")
        out.append(f"  attention: {', '.join(masks)}, {att['cost_vs_causal']:.3f}x the causal mask's work{cp}")
    if lay.get("loss", "standard") != "standard":
        out.append(f"  loss: {lay['loss']} cross-entropy")
    fw = r.get("framework")
    if fw:
        on = [o["name"] if o["value"] is True else f"{o['name']} {o['value']}" for o in fw["options"]
              if o["given"] or o["value"] is True]
        out.append(f"  framework: {fw['title']} ({fw['name']}){': ' + ', '.join(on) if on else ''};"
                   f" attention kernel {fw['attention_kernel']}")
        for note in fw["notes"]:
            out.append(f"    {note}")
    out.append(f"  FLOPs: {r['model']['flop_convention']}")
    for w in r.get("warnings") or []:
        out.append(f"  warning: {w}")
    sim = r["sim"]
    out.append(f"  simulated {sim['ranks_simulated']} ranks, {sim['events']:,} events in {sim['wall_s']:.2f} s")
    return "\n".join(out)
