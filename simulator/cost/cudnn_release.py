"""Which cuDNN release's published attention points price a run (`cluster.cudnn_version`).

cuDNN's fused attention changes speed from release to release, most on a new architecture: on the HGX B200 PyTorch
SDPA's cuDNN attention ran the Llama 3.1 405B-like causal layer (head dim 128) at 1,211 / 945 TFLOP/s forward /
backward at 8K tokens under cuDNN 9.10.2 (NVIDIA cudnn-frontend f937055, 2025-06-12) and the frontend graph API at
1,384 / 995 under 9.13.1 (0b1577c, 2025-10-10); at 1K tokens 216 / 178 against 561 / 377. A run of May 2025 software
priced from October's tables reads cuDNN's gain over FlashAttention-2 too large (validation/references/
hf_llama32_1b_b200.yaml, cuDNN 9.9.0; torchtitan_llama3_8b_b200_sdpa.yaml).

So a cuDNN point of `kernel_data.json` may name its release (`cudnn_version`, "9.10.2"). Where a GPU's table (family,
phase, mask, head dim) holds points of several releases, one release prices it:

- the scenario names none: the newest published (what a current stack runs);
- it names release V: the newest published release not newer than V; where every published release is newer than V,
  the oldest (the closest there is; the report says so: `describe`).

Points without a release are taken whatever the scenario names. The choice is per table: a GPU whose causal and
non-causal points come from different releases (GB200: 9.17.0 causal, 9.18.1 non-causal) keeps both.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..cudnn_spec import release


def not_newer(published: tuple[int, ...], wanted: tuple[int, ...]) -> bool:
    """Whether a published release is at or before the wanted one; '9.10' names every 9.10.x."""
    return published[:len(wanted)] <= wanted


@dataclass(frozen=True)
class Release:
    """The release one table was priced from."""
    chosen: str
    wanted: str | None
    older_than_published: bool


def describe(chosen: dict) -> str:
    """The releases the cuDNN tables were priced from, for the report's kernel line ("" where no table names one):
    'cuDNN 9.13.1, the newest published'; 'cuDNN 9.10.2 (cluster.cudnn_version 9.9.0 is older than any published)';
    a GPU whose masks come from different releases names each: 'cuDNN 9.17.0 causal, 9.18.1 no mask, ...'."""
    cudnn = {k: r for k, r in chosen.items() if k[0] == "cudnn"}
    if not cudnn:
        return ""
    masks: dict = {}
    for (_, _, causal, _), r in cudnn.items():
        masks.setdefault(r.chosen, set()).add("causal" if causal else "no mask")
    names = sorted(masks, key=release)
    text = "cuDNN " + (names[0] if len(names) == 1 else ", ".join(f"{n} {' and '.join(sorted(masks[n]))}" for n in names))
    r = next(iter(cudnn.values()))
    if r.wanted is None:
        return text + ", the newest published"
    if any(x.older_than_published for x in cudnn.values()):
        return text + f" (cluster.cudnn_version {r.wanted} is older than any published)"
    return text + f" (cluster.cudnn_version {r.wanted})"


def table_key(p: dict) -> tuple:
    return p["family"], p["phase"], bool(p["causal"]), int(p["d_head"])


def select(points: list[dict], wanted: str | None) -> tuple[list[dict], dict]:
    """The points that price a run on `wanted` (a release string, or None: the newest), in their order, and by table
    key the Release each table whose points name one was priced from."""
    want = release(wanted) if wanted is not None else None
    by_table: dict = {}
    for p in points:
        if p.get("cudnn_version") is not None:
            by_table.setdefault(table_key(p), set()).add(release(p["cudnn_version"]))
    pick, chosen = {}, {}
    for key, releases in by_table.items():
        ordered = sorted(releases)
        fits = [r for r in ordered if want is None or not_newer(r, want)]
        pick[key] = fits[-1] if fits else ordered[0]
        chosen[key] = Release(".".join(map(str, pick[key])), wanted, not fits)
    kept = [p for p in points if p.get("cudnn_version") is None or release(p["cudnn_version"]) == pick[table_key(p)]]
    return kept, chosen
