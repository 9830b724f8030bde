"""The whole-run section of the terminal report (`run --tokens`), from `WholeRun.to_json()`."""
from __future__ import annotations


def _dur(s: float) -> str:
    if s >= 86400:
        return f"{s / 86400:.1f} days"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def _tokens(n: float) -> str:
    for div, suf in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.3g}{suf}"
    return f"{n:.0f}"


def format_whole_run(w: dict) -> str:
    out = [f"  whole run: {_tokens(w['tokens'])} tokens"]
    cost = "n/a" if w["cost"] is None else f"${w['cost']:,.0f} at ${w['price_per_gpu_hour']:.2f}/GPU-h"
    rows = [
        ("wall-clock", f"{w['days']:.1f} days ({w['failure_free_days']:.1f} without failures)"),
        ("GPU-hours", f"{w['gpu_hours']:,.0f}"),
        ("cost", cost),
        ("expected interruptions", f"{w['interruptions']:.0f} ({w['interruptions_per_day']:.2f} per day)"),
        ("goodput", f"{w['goodput'] * 100:.1f} % of wall-clock time trains"),
    ]
    width = max(len(k) for k, _ in rows)
    out += [f"    {k.ljust(width)}  {v}" for k, v in rows]
    for p in w["phases"]:
        ck = p["checkpoint"]
        mode = "async" if ck["asynchronous"] else "sync"
        out.append(f"    {p['name']}: {_tokens(p['tokens'])} tokens, {p['steps']:,} steps of {p['step_s']:.3f} s"
                   f" ({p['estimator']} estimator), {p['gpus']} GPUs")
        out.append(f"      checkpoint {ck['total_bytes'] / 1e9:,.0f} GB ({ck['per_rank_bytes'] / 1e9:.2f} GB per rank),"
                   f" write {_dur(ck['write_s'])}, {mode}: stalls {_dur(ck['stall_s'])}"
                   + (f", holds {ck['host_bytes_per_node'] / 1e9:.1f} GB pinned host memory per node" if ck["asynchronous"] else ""))
        out.append(f"      interval {_dur(p['interval_s'])} ({p['interval_steps']} steps, {p['interval_chosen']};"
                   f" Young {_dur(p['young_interval_s'])}, Daly {_dur(p['daly_interval_s'])}), {p['checkpoints']:,} checkpoints")
        out.append(f"      mean time between interruptions {_dur(p['mtbi_s'])}; restart cost {_dur(p['restart_s'])}"
                   f" + lost work {_dur(p['lost_work_per_interruption_s'])} per interruption; goodput {p['goodput'] * 100:.1f} %")
    out.append(f"    failure rate {w['failures_per_gpu_hour']:.3g} per GPU-hour: {w['failure_source']}")
    out.append(f"    price: {w['price_source']}")
    return "\n".join(out)
