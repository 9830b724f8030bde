"""`python -m calibrate`: measure this machine's kernels and collectives into a calibration profile.

    python -m calibrate --gpu N [--out FILE] [--scenario FILE] [--quick]
    python -m calibrate --device cpu [--out FILE] [--scenario FILE] [--quick] [--threads T] [--cpu-ranks R]
    python -m calibrate replay SCENARIO ...      (calibrate/replay/cli.py)

Exit codes (docs/interface.md): 0 success; 2 bad input (one line on stderr); 1 anything else.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PROBE_NAMES = ("gemm", "attention", "memory", "optimizer", "framework", "collectives")
PROFILE_DIR = Path(__file__).resolve().parent / "profiles"


class BadInput(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        raise BadInput(" ".join(message.split()))


MAX_THREADS = 1024
"""--threads: more than any host has cores."""
MAX_CPU_RANKS = 64
"""--cpu-ranks: gloo processes on one host; each holds a torch runtime (~300 MB)."""
MAX_SEED = 2**63 - 1
"""torch.manual_seed takes a 64-bit seed."""
MAX_BUDGET_S = 7 * 24 * 3600.0
"""--budget-s: at most a week."""


def terminate_on_sigterm() -> None:
    """SIGTERM ends the run as Ctrl-C does: a KeyboardInterrupt in the main process, whose handlers stop
    the worker processes (collectives, framework probes, replay ranks) before exiting. Python's default
    for SIGTERM kills the parent at once and leaves the spawned workers running."""
    import signal  # noqa: PLC0415

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def check_numbers(args) -> None:
    """Every numeric flag in range, before torch is imported or anything measured."""
    if args.gpu is not None and not 0 <= args.gpu < 4096:
        raise BadInput(f"--gpu {args.gpu}: not a device index (0 .. 4095)")
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        raise BadInput(f"--threads {args.threads}: must be at least 1 and at most {MAX_THREADS}")
    if not 1 <= args.cpu_ranks <= MAX_CPU_RANKS:
        raise BadInput(f"--cpu-ranks {args.cpu_ranks}: must be at least 1 and at most {MAX_CPU_RANKS}")
    if not 0 <= args.seed <= MAX_SEED:
        raise BadInput(f"--seed {args.seed}: must be 0 .. 2**63-1")
    if args.budget_s is not None and not 0 < args.budget_s <= MAX_BUDGET_S:
        raise BadInput(f"--budget-s {args.budget_s:g}: must be more than 0 and at most {MAX_BUDGET_S:g} seconds")


def check_out(out: Path) -> None:
    """The profile can be written to `out` (checked before measuring, so no work is lost)."""
    from simulator.errors import ScenarioError  # noqa: PLC0415
    from simulator.outputs import check_output  # noqa: PLC0415
    try:
        check_output(str(out), "--out")
    except ScenarioError as e:
        raise BadInput(str(e)) from None


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m calibrate", description=(
        "Measure GEMMs, attention, memory-bound kernels, the optimizer step and collectives into a calibration "
        "profile (JSON) for a scenario's cluster.profile. `python -m calibrate replay ...` runs a scenario for real."))
    where = p.add_mutually_exclusive_group()
    where.add_argument("--gpu", type=int, metavar="N",
                       help="CUDA device index to measure kernels on (collectives use every visible GPU)")
    where.add_argument("--device", choices=("cpu", "cuda"), help="cpu: CPU kernels and gloo processes; cuda: --gpu 0")
    p.add_argument("--out", metavar="FILE", help="profile to write (default: calibrate/profiles/<device>.json)")
    p.add_argument("--scenario", metavar="FILE",
                   help="measure exactly the GEMM, attention and memory-bound shapes this scenario's ops need")
    p.add_argument("--quick", action="store_true",
                   help="a small sweep of shapes and sizes (about 70 CPU-seconds on CPU; wall time depends on the load)")
    p.add_argument("--threads", type=int, metavar="T",
                   help="CPU: torch threads per process (default 1: one core per rank, as torchrun sets it)")
    p.add_argument("--cpu-ranks", type=int, default=2, metavar="R",
                   help="CPU: gloo processes for the collectives (group sizes 2, 4, ... up to R; default 2)")
    p.add_argument("--only", metavar="LIST", help=f"comma-separated subset of {','.join(PROBE_NAMES)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-s", type=float, metavar="S",
                   help="stop measuring after S seconds and write what was measured (the rest is listed as skipped): "
                        "for a machine lent for a fixed time")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (there is none when stderr is not a terminal)")
    return p


def _replay(argv: list[str]) -> int:
    try:
        from calibrate.replay.cli import main as replay_main  # noqa: PLC0415 (a separate piece, loaded on demand)
    except ModuleNotFoundError as e:
        if e.name in ("calibrate.replay", "calibrate.replay.cli"):
            print("calibrate replay: not available in this checkout (calibrate/replay/cli.py with main(argv) is missing)",
                  file=sys.stderr)
            return 1
        raise
    except ImportError as e:
        print(f"calibrate replay: cannot load calibrate.replay.cli.main: {e}", file=sys.stderr)
        return 1
    return int(replay_main(argv) or 0)


def _resolve(args):
    """(torch device, probes) from the arguments, or BadInput."""
    import torch  # noqa: PLC0415 (a clear message below when torch is missing)

    if args.gpu is not None or args.device == "cuda":
        index = args.gpu if args.gpu is not None else 0
        flag = f"--gpu {index}" if args.gpu is not None else "--device cuda"
        if not torch.cuda.is_available():
            raise BadInput(f"{flag}: CUDA is not available (torch {torch.__version__}"
                           f"{', a CPU-only build' if torch.version.cuda is None else ''}); use --device cpu")
        count = torch.cuda.device_count()
        if not 0 <= index < count:
            raise BadInput(f"{flag}: no such GPU ({count} visible: 0..{count - 1})")
        device = torch.device("cuda", index)
    elif args.device == "cpu":
        device = torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda", 0)
    else:
        raise BadInput("no GPU visible: pass --device cpu to calibrate this CPU (or --gpu N on a CUDA machine)")
    probes = PROBE_NAMES
    if args.only:
        probes = tuple(x.strip() for x in args.only.split(",") if x.strip())
        unknown = [x for x in probes if x not in PROBE_NAMES]
        if unknown or not probes:
            raise BadInput(f"--only {args.only}: unknown probe {unknown[0] if unknown else '(none)'!r} "
                           f"(allowed: {', '.join(PROBE_NAMES)})")
    return device, probes


def default_profile_path(device, name: str) -> Path:
    """Where a profile of this device goes unless --out says otherwise."""
    slug = "cpu-host" if device.type == "cpu" else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return PROFILE_DIR / f"{slug}.json"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    terminate_on_sigterm()
    if argv and argv[0] == "replay":
        return _replay(argv[1:])
    try:
        args = parser().parse_args(argv)
        check_numbers(args)
        if args.out:
            check_out(Path(args.out))
        try:
            import torch  # noqa: F401,PLC0415
        except ImportError:
            raise BadInput("torch is not installed: pip install '.[calibrate]'") from None
        return _calibrate(args, argv)
    except BadInput as e:
        print(f"calibrate: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("calibrate: interrupted; no profile written", file=sys.stderr)
        return 130


def _calibrate(args, argv: list[str]) -> int:
    import torch  # noqa: PLC0415
    from rich.console import Console  # noqa: PLC0415

    from simulator.errors import ScenarioError  # noqa: PLC0415
    from simulator.progress import Stopwatch, stderr_is_terminal  # noqa: PLC0415
    from simulator.scenario import load_scenario  # noqa: PLC0415

    from .atomic import write_atomic  # noqa: PLC0415
    from .plan import default_plan, scenario_plan  # noqa: PLC0415
    from .probes import Context  # noqa: PLC0415
    from .probes.gemm import has_fp8  # noqa: PLC0415
    from .provenance import device_name, matching_spec, provenance  # noqa: PLC0415
    from .run import RunOptions, calibrate, profile_text  # noqa: PLC0415
    from .summary import summary_table  # noqa: PLC0415

    clock = Stopwatch("calibrate")
    device, probes = _resolve(args)
    name = device_name(device)
    out = Path(args.out) if args.out else default_profile_path(device, name)
    check_out(out)
    sc = None
    if args.scenario:
        try:
            sc = load_scenario(args.scenario)
        except ScenarioError as e:
            raise BadInput(f"--scenario {args.scenario}: {e}") from None
    threads = args.threads or (1 if device.type == "cpu" else torch.get_num_threads())
    torch.set_num_threads(threads)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    devices = torch.cuda.device_count() if device.type == "cuda" else args.cpu_ranks
    plan = default_plan(device.type, args.quick, fp8=has_fp8(device), devices=devices, cpu_ranks=args.cpu_ranks)
    if sc is not None:
        plan = scenario_plan(sc, plan)
    console = Console(stderr=True)
    prov = provenance(device, device_count=devices, threads=threads, quick=args.quick,
                      scenario=args.scenario, argv=argv)
    ctx = Context(device=device, plan=plan, seed=args.seed)
    # the bar only on a terminal (a pipe or CI log gets the wall-time line alone)
    bar = not args.no_progress and stderr_is_terminal()
    profile = calibrate(ctx, RunOptions(probes=probes, threads=threads, progress=bar, budget_s=args.budget_s), prov,
                        matching_spec(device, name), console)
    write_atomic(out, profile_text(profile))
    # piped output gets rich's 80 columns unless told: the table needs about 100
    Console(width=None if sys.stdout.isatty() else 110).print(summary_table(profile))
    print(f"wrote {out}", flush=True)
    clock.report()
    return 0
