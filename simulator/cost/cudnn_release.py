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

A table's points without a release are one more release, older than every named one: the H100's cuDNN points
are FlashAttention-3's paper's (arXiv 2407.08608, July 2024), which does not name its cuDNN, next to cudnn-frontend's
9.19.1 runs on the H200 (2026-02). A scenario naming a release older than every named one takes them; one naming
none, or 9.19.1 or later, takes 9.19.1. Where that older release has no table of its own (the paper gives no causal
backward), a run on it leaves the named releases' table out too and is priced as before they were added (from the
other mask's table). A table with no named release (every FlashAttention table) is taken whatever the scenario
names. The choice is per table: a GPU whose causal and non-causal points come from different releases
(GB200: 9.17.0 causal, 9.18.1 non-causal) keeps both.

`OLDEST` asks for the oldest release of every table (the unnamed points where a table has them): the ratios one GPU's
tables lend another (`kernel_data.reference_kernels`: head dims a table lacks) are taken within one release.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..cudnn_spec import release

OLDEST = "oldest"
"""`select`'s wanted release for the oldest of every table."""
UNNAMED = "unnamed"
"""`Release.chosen` where a table's points without a release price it."""


def not_newer(published: tuple[int, ...], wanted: tuple[int, ...]) -> bool:
    """Whether a published release is at or before the wanted one; '9.10' names every 9.10.x."""
    return published[:len(wanted)] <= wanted


@dataclass(frozen=True)
class Release:
    """The release one table was priced from."""
    chosen: str
    """The release ("9.19.1"), or `UNNAMED`: the table's points without one."""
    wanted: str | None
    older_than_published: bool
    newest: str = ""
    """The table's newest named release."""


def describe(chosen: dict) -> str:
    """The releases the cuDNN tables were priced from, for the report's kernel line ("" where no table names one):
    'cuDNN 9.13.1, the newest published'; 'cuDNN 9.10.2 (cluster.cudnn_version 9.9.0 is older than any published)';
    a GPU whose masks come from different releases names each: 'cuDNN 9.17.0 causal, 9.18.1 no mask, ...'; a table
    priced by its points without a release: 'cuDNN older than 9.19.1 (its points name no release; ...)'."""
    cudnn = {k: r for k, r in chosen.items() if k[0] == "cudnn"}
    if not cudnn:
        return ""
    masks: dict = {}
    for (_, _, causal, _), r in cudnn.items():
        masks.setdefault(r.chosen, set()).add("causal" if causal else "no mask")
    names = sorted((n for n in masks if n != UNNAMED), key=release)
    if UNNAMED in masks:
        newer = sorted({r.newest for r in cudnn.values() if r.chosen == UNNAMED}, key=release)[0]
        names = [f"older than {newer} (its points name no release)"] + names
        masks[names[0]] = masks.pop(UNNAMED)
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
    """The points that price a run on `wanted` (a release string; None: the newest; `OLDEST`: the oldest), in their
    order, and by table key the Release each table whose points name one was priced from. A table's points without a
    release are its oldest release (`UNNAMED`), taken where every named one is newer than `wanted`."""
    want = release(wanted) if wanted not in (None, OLDEST) else wanted
    by_table: dict = {}
    unnamed = set()
    for p in points:
        if p.get("cudnn_version") is not None:
            by_table.setdefault(table_key(p), set()).add(release(p["cudnn_version"]))
        else:
            unnamed.add(table_key(p))
    unnamed_families = {k[0] for k in unnamed} & {k[0] for k in by_table}  # families with an unnamed release
    pick, chosen, dropped = {}, {}, set()
    for key, releases in by_table.items():
        ordered = sorted(releases)
        newest = ".".join(map(str, ordered[-1]))
        if want == OLDEST:
            fits = []
        else:
            fits = [r for r in ordered if want is None or not_newer(r, want)]
        if fits:
            pick[key] = fits[-1]
        elif key in unnamed:
            pick[key] = None
        elif key[0] in unnamed_families:  # the family's unnamed release has no such table: price it as that one did
            dropped.add(key)
            continue
        else:
            pick[key] = ordered[0]
        shown = UNNAMED if pick[key] is None else ".".join(map(str, pick[key]))
        older = not fits and key not in unnamed and want != OLDEST
        chosen[key] = Release(shown, None if want in (None, OLDEST) else wanted, older, newest)

    def kept(p: dict) -> bool:
        key = table_key(p)
        if key in dropped:
            return False
        if key not in pick:
            return True
        named = p.get("cudnn_version")
        return (named is None) if pick[key] is None else (named is not None and release(named) == pick[key])
    return [p for p in points if kept(p)], chosen
