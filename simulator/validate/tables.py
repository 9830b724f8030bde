"""How `validate`'s result is shown: the accuracy table (text and markdown), its JSON, and the plot of
predicted against measured throughput. The numbers come from `validate.py`."""
from __future__ import annotations

from collections import defaultdict

from .playbook import DEGRADED_P2P_LATENCY_US
from .accuracy import MAIN_GROUP, PRE_FIX_GROUP, SLOW_SEND_FRACTION, pct

def _f(x, digits=1, suffix="") -> str:
    return "-" if x is None else f"{x:.{digits}f}{suffix}"


def markdown_table(result: dict) -> str:
    """Per set/split/group: runs, MAPEs, OOM accuracy, worst case. It is what docs/accuracy.md and the README show."""
    net = {"measured": "each playbook job with the busbw nanotron measured for it",
           "spec": "every job with the topology YAML"}.get(result.get("network", "measured"), result.get("network"))
    lines = [f"Estimator: `{result['estimator']}`; network: {net}; {result['cases']['evaluated']} of {result['cases']['population']} "
             f"runs{' (stratified sample)' if result['cases']['sample'] else ''}.", "",
             "| set | split | group | runs | timed | throughput MAPE | median APE | within 25% | bias | worst (throughput) "
             "| step-time MAPE | memory MAPE | OOM right |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["summary"]:
        t, m, o = r["throughput"], r["memory"], r["oom"]
        worst = f"{t['worst']['error_pct']:+.0f}% `{t['worst']['id']}`" if t["worst"] else "-"
        oom = f"{o['correct']}/{o['n']} ({_f(o['accuracy_pct'], 0, '%')})" if o["n"] else "-"
        if o.get("tight_but_ran") or o.get("tight_and_oom"):
            oom += f"; read tight: {o.get('tight_but_ran', 0)} ran, {o.get('tight_and_oom', 0)} ran out"
        within = f"{100 * t['within_25pct'] / t['n']:.0f}%" if t["n"] else "-"
        lines.append(f"| {r['set']} | {r['split']} ({', '.join(r['labels'])}) | {r['group']} | {r['runs']} | {t['n']} "
                     f"| {_f(t['mape_pct'], 1, '%')} | {_f(t['median_ape_pct'], 1, '%')} | {within} | {_f(t['bias_pct'], 1, '%')} "
                     f"| {worst} | {_f(r['step_time']['mape_pct'], 1, '%')} "
                     f"| {_f(m['mape_pct'], 1, '%')} | {oom} |")
    nf = result.get("noise_floor")
    if nf:
        tw = nf["zero_twins"]
        exact = (f"{nf['layouts_repeated']} layouts run more than once, median spread {_f(nf['median_relative_spread_pct'])}%"
                 if nf["layouts_repeated"] else "no layout was run twice")
        lines += ["", f"Noise floor (playbook): {exact}; {tw['layouts']} ZeRO-0/ZeRO-1 twins on one node (pp = 1, "
                      f"otherwise identical) differ by a median {_f(tw['median_relative_spread_pct'])}% "
                      f"(max {_f(tw['max_relative_spread_pct'])}%): throughput MAPE of their mean {_f(tw['mape_pct'], 2)}%, "
                      "an upper bound on the measurement noise of one timed step."]
        mt = nf.get("multinode_zero_twins")
        if mt and mt["layouts"]:
            lines.append(f"On 2-64 nodes (pp = 1, both jobs in the same network state), {mt['layouts']} ZeRO-0/ZeRO-1 twins "
                         f"differ by a median {_f(mt['median_relative_spread_pct'])}% (p90 {_f(mt['p90_relative_spread_pct'])}%, "
                         f"max {_f(mt['max_relative_spread_pct'])}%): a predictor of each pair's mean would score a "
                         f"throughput MAPE of {_f(mt['mape_pct'], 1)}% on them.")
    ss = result.get("slow_sends")
    if ss:
        parts = [f"{v['runs']} of {v['of']} {k} runs carry {v['mape_points']:.1f} points of its throughput MAPE "
                 f"(the other runs: {_f(v['rest_mape_pct'], 1, '%')})" for k, v in ss.items()]
        lines += ["", f"Slow-send signature (a diagnostic; every run stays in the scores above): pipeline runs that took at "
                      f"least {SLOW_SEND_FRACTION * DEGRADED_P2P_LATENCY_US / 1e3:.0f} ms more than predicted per blocking "
                      f"send (with `--network measured` a send on a job whose probe shows a degraded node is priced at "
                      f"{DEGRADED_P2P_LATENCY_US / 1e3:.0f} ms, so there these are jobs whose probes show none): "
                      + "; ".join(parts) + "."]
    lines += published_tables(result)
    mem_lines = [f"| {r['set']} | {r['split']} | {r['group']} | {r['memory']['n']} | {_f(r['memory']['mape_pct'], 1, '%')} "
                 f"| {_f(r['memory']['bias_pct'], 1, '%')} | {r['memory_peak']['n']} | {_f(r['memory_peak']['mape_pct'], 1, '%')} "
                 f"| {_f(r['memory_peak']['bias_pct'], 1, '%')} |" for r in result["summary"] if r["memory"]["n"] or r["memory_peak"]["n"]]
    if mem_lines:
        lines += ["", "Memory, pipeline stage 0: model states vs measured allocated peak (optimizer phase: nanotron "
                      "resets the peak after the backward), and predicted peak vs measured reserved peak.", "",
                  "| set | split | group | states n | states MAPE | bias | peak n | peak vs reserved MAPE | bias |",
                  "|---|---|---|---|---|---|---|---|---|"] + mem_lines
    return "\n".join(lines)


def published_tables(result: dict) -> list[str]:
    """Per framework and split, per feature, the feature ratios on otherwise-identical pairs, and the corpus rows
    not scored (validate/corpus.py). Nothing when the result has no published cases."""
    lines = []
    fws = [r for r in result.get("frameworks", []) if r["n"]]
    if fws and result.get("features"):
        lines += ["", "Per framework (playbook = nanotron, main group; published = papers + NeMo/Megatron-Bridge corpus), "
                      "throughput error:", "", "| framework | split | runs | MAPE | median APE | bias |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['framework']} | {r['split']} | {r['n']} | {_f(r['mape_pct'], 1, '%')} | {_f(r['median_ape_pct'], 1, '%')} "
                  f"| {_f(r['bias_pct'], 1, '%')} |" for r in fws]
    if result.get("features"):
        lines += ["", "Per feature (published cases), throughput error by split:", "",
                  "| framework | feature | value | split | runs | MAPE | median APE | bias |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['framework']} | {r['feature']} | {r['value']} | {r['split']} | {r['n']} | {_f(r['mape_pct'], 1, '%')} "
                  f"| {_f(r['median_ape_pct'], 1, '%')} | {_f(r['bias_pct'], 1, '%')} |" for r in result["features"]]
    pairs = result.get("feature_pairs")
    if pairs:
        lines += ["", "Feature ratios: published runs that differ only in one feature (b / a, tokens/s/GPU or TFLOP/s/GPU), "
                      "measured against clustersim's ratio for the same pair:", "",
                  "| feature | a | b | split | differs | measured b/a | predicted b/a | ratio error |", "|---|---|---|---|---|---|---|---|"]
        for r in pairs:
            diff = "; ".join(f"{k.split('.')[-1]} {a} -> {b}" for k, (a, b) in r["differs"].items()) or "release only"
            lines.append(f"| {r['kind']} | `{r['a']}` | `{r['b']}` | {r['split']} | {diff} | {r['measured_ratio']:.3f} "
                         f"| {r['predicted_ratio']:.3f} | {r['ratio_error_pct']:+.1f}% |")
    elif result.get("features"):
        lines += ["", "Feature ratios: no two published runs differ in one feature only."]
    skipped = result.get("corpus_skipped")
    if skipped:
        why = defaultdict(list)
        for r in skipped:
            why[r["reason"]].append(r["id"])
        lines += ["", f"Corpus rows not scored ({len(skipped)}):", ""]
        lines += [f"- {reason}: {len(ids)} ({', '.join(sorted(ids))})" for reason, ids in sorted(why.items())]
    return lines


def format_text(result: dict, verbose: bool = False) -> str:
    out = []
    if verbose:
        out.append(f"{'run':<78} {'split':<10} {'meas tok/s/GPU':>14} {'pred':>9} {'err':>7} {'meas GiB':>8} {'states':>6} "
                   f"{'status':>7} {'fits':>5}")
        for o in result["outcomes"]:
            c, p = o.case, o.predicted
            if o.error:
                out.append(f"{c.id[:78]:<78} {c.split:<10} {o.error[:60]}")
                continue
            meas = c.tokens_per_s_per_gpu or c.model_tflops_per_gpu
            pred = p["tokens_per_s_per_gpu"] if c.tokens_per_s_per_gpu else p["model_tflops_per_gpu"]
            err = o.rel("tokens_per_s_per_gpu") if c.tokens_per_s_per_gpu else o.rel("model_tflops_per_gpu")
            out.append(f"{c.id[:78]:<78} {c.split:<10} {_f(meas, 0):>14} {pred:>9.0f} {_f(pct(err), 1, '%'):>7} "
                       f"{_f(c.mem_gib, 1):>8} {_f(p['mem_states_gib'], 1):>6} {c.status:>7} {str(p['fits']):>5}")
        out.append("")
    out.append(markdown_table(result))
    if result["busbw"]:
        out += ["", "Collectives: measured busbw (playbook CSV: 1 GiB fp32, median over jobs, by the network state the "
                    "job's one-node all-reduce shows) / the topology YAML's, GB/s. The validation prices each job with "
                    "its own measurement (`--network measured`).",
                "| nodes | state | jobs | scope | all-reduce | all-gather | reduce-scatter |", "|---|---|---|---|---|---|---|"]
        cells, jobs = defaultdict(dict), {}
        for b in result["busbw"]:
            key = (b["nodes"], b["state"], b["scope"])
            cells[key][b["collective"]] = f"{b['measured_busbw_gbps']:.0f} / {_f(b['modelled_busbw_gbps'], 0)}"
            jobs[key] = max(jobs.get(key, 0), b["runs"])
        for (nodes, state, scope), c in sorted(cells.items(), key=lambda kv: (kv[0][2] != "intranode8", kv[0][1], kv[0][0])):
            if scope == "intranode8" and nodes != min(n for n, s, sc in cells if s == state and sc == scope):
                continue  # one node's 8 GPUs: the same on every job of a state
            label = "8 GPUs of one node" if scope == "intranode8" else f"all {nodes * 8} GPUs"
            out.append(f"| {nodes if scope == 'alljob' else 1} | {state} | {jobs[(nodes, state, scope)] if scope == 'alljob' else '-'} "
                       f"| {label} | {c.get('all_reduce', '-')} | {c.get('all_gather', '-')} | {c.get('reduce_scatter', '-')} |")
    excl = defaultdict(int)
    for r in result["summary"]:
        for k, v in r["excluded"].items():
            excl[k] += v
    out += ["", f"Excluded: {excl['status_other']} runs with status Other (no measurement), {excl['not_expressible']} "
                f"layouts clustersim rejects, {excl['failed']} failed. Runs with pp > 1 before nanotron's PP fix are "
                f"scored in the '{PRE_FIX_GROUP}' group, not in 'main'. Wall time {result['wall_s']:.0f} s."]
    return "\n".join(out)


def to_json(result: dict, verbose: bool = False) -> dict:
    out = {k: v for k, v in result.items() if k != "outcomes"}
    if verbose:
        out["runs"] = [{"id": o.case.id, "set": o.case.set, "split": o.case.split, "group": o.case.group,
                        "status": o.case.status, "measured": {"tokens_per_s_per_gpu": o.case.tokens_per_s_per_gpu,
                                                              "step_time_s": o.case.step_time_s, "mem_gib": o.case.mem_gib,
                                                              "model_tflops_per_gpu": o.case.model_tflops_per_gpu},
                        "predicted": {k: v for k, v in o.predicted.items() if k != "breakdown"}, "error": o.error or None}
                       for o in result["outcomes"]]
    return out


def plot(result: dict, path: str) -> None:
    """Predicted vs measured, log-log: throughput (left) and rank-0 peak memory (right); fit / validation /
    pre-PP-fix / published in different colours, y = x and +-25 % lines."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    styles = {("playbook", "fit", MAIN_GROUP): ("tab:blue", "playbook fit (1B/3B/8B)"),
              ("playbook", "validation", MAIN_GROUP): ("tab:red", "playbook validation (80B/469G)"),
              ("playbook", "fit", PRE_FIX_GROUP): ("lightsteelblue", "fit, pp>1 before PP fix"),
              ("playbook", "validation", PRE_FIX_GROUP): ("lightsalmon", "validation, pp>1 before PP fix")}
    panels = (("tokens_per_s_per_gpu", "tokens_per_s_per_gpu", "Throughput", "tokens/s/GPU"),
              ("mem_gib", "mem_states_gib", "Stage-0 model states vs allocated peak", "GiB"))
    for ax, (meas_key, pred_key, title, unit) in zip(axes, panels):
        pts = defaultdict(lambda: ([], []))
        for o in result["outcomes"]:
            c = o.case
            if o.error or c.status != "Success":
                continue
            mk, pk = meas_key, pred_key
            if meas_key == "tokens_per_s_per_gpu" and c.tokens_per_s_per_gpu is None:
                mk = pk = "model_tflops_per_gpu"  # published TFLOP/s: same axes, own colour
            m, p = getattr(c, mk), o.predicted.get(pk)
            if m and p:
                s = (c.set, c.split, c.group) if c.set == "playbook" else ("published",)
                pts[s][0].append(m)
                pts[s][1].append(p)
        lo = min((min(v[0] + v[1]) for v in pts.values()), default=1)
        hi = max((max(v[0] + v[1]) for v in pts.values()), default=10)
        for s, (xs, ys) in sorted(pts.items(), key=lambda kv: len(kv[0]) > 1 and kv[0][2] == MAIN_GROUP):
            color, label = styles.get(s, ("tab:green", "published (TFLOP/s/GPU)"))
            ax.scatter(xs, ys, s=10, alpha=0.6, color=color, label=f"{label} ({len(xs)})", edgecolors="none")
        xx = [lo / 1.5, hi * 1.5]
        ax.plot(xx, xx, "k-", lw=0.8)
        for f in (0.75, 1.25):
            ax.plot(xx, [x * f for x in xx], "k:", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(*xx)
        ax.set_ylim(*xx)
        ax.set_xlabel(f"measured, {unit}")
        ax.set_ylabel(f"predicted, {unit}")
        ax.set_title(f"{title} ({result['estimator']} estimator)")
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
