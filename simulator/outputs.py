"""Output files written whole or not at all, and strict JSON on stdout.

Every command that writes files (`run --trace/--plot/--memory-plot`, `sweep --plot/--export-out`,
`compare --plot`, `validate --plot`) checks each path before any work (`check_output`: its directory
exists and is writable, it is not a directory, its extension is one the writer knows), has its writers
write to temporary names beside the targets (`Outputs.temp`), and renames them over the targets only
once everything succeeded (`Outputs.commit`); any failure on the way removes every temporary, so a run
leaves either all its files or none. `strict_json` refuses NaN and Infinity, which `json.dumps` would
print as non-JSON tokens. `calibrate/atomic.py` is the same idea for one text file.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

from .errors import ScenarioError
from .inputs import short

PLOT_SUFFIXES = (".png", ".svg", ".pdf")
"""What the matplotlib figures are written as (the extension picks the format)."""
FILE_MODE = 0o644
"""Mode of a new output file (mkstemp's temporaries are 0600)."""
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.EISDIR,
                errno.ENOTDIR, errno.EFBIG, errno.ENAMETOOLONG, errno.EIO}
"""OSErrors that mean "this output cannot be written here": bad input (exit 2), not a bug."""


def check_output(path: str, flag: str, suffixes: tuple[str, ...] | None = None) -> Path:
    """`path` as a Path if a file can be written there, else a ScenarioError naming the flag."""
    p = Path(path)
    try:
        if p.is_dir():
            raise ScenarioError(flag, f"{short(path)} is a directory", "a file name")
        parent = p.resolve().parent
        if not parent.is_dir():
            raise ScenarioError(flag, f"directory {short(str(parent))} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ScenarioError(flag, f"directory {short(str(parent))} is not writable")
    except (OSError, ValueError) as e:
        raise ScenarioError(flag, f"cannot write {short(path)}: {getattr(e, 'strerror', None) or e}") from None
    if suffixes and p.suffix.lower() not in suffixes:
        raise ScenarioError(flag, f"{short(path)} has no known extension", " | ".join(suffixes))
    return p


def check_distinct(paths: dict[str, str | None]) -> None:
    """Two flags naming the same file would have one output overwrite the other."""
    seen: dict[Path, str] = {}
    for flag, path in paths.items():
        if not path:
            continue
        key = Path(path).resolve()
        if key in seen:
            raise ScenarioError(flag, f"{short(path)} is also given to {seen[key]}", "a different file per output")
        seen[key] = flag


class Outputs:
    """The files one command writes. Use as a context manager: a failure inside removes the temporaries;
    `commit()` moves them onto their targets (and on a failure there removes what it already moved)."""

    def __init__(self):
        self.pending: list[tuple[str, Path]] = []
        self.folders: list[tuple[str, Path]] = []

    def temp(self, target: str | Path) -> str:
        """A fresh temporary file beside `target`, with the same extension (writers pick formats by it)."""
        target = Path(target)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix or ".tmp", dir=target.resolve().parent)
        os.close(fd)
        self.pending.append((tmp, target))
        return tmp

    def temp_prefix(self, prefix: str) -> str:
        """For a writer that names its files PREFIX_*: a prefix inside a fresh temporary folder beside
        them; commit() moves whatever it wrote there next to `prefix`."""
        parent = Path(prefix).resolve().parent
        folder = tempfile.mkdtemp(prefix=".clustersim-", dir=parent)
        self.folders.append((folder, parent))
        return os.path.join(folder, Path(prefix).name)

    def commit(self) -> None:
        """Move every temporary a writer filled onto its target; one left empty (nothing was written to it,
        e.g. --trace with the analytic estimator) is removed instead."""
        done: list[Path] = []
        for folder, parent in self.folders:
            self.pending += [(os.path.join(folder, name), parent / name) for name in sorted(os.listdir(folder))]
        try:
            for tmp, target in self.pending:
                if os.path.getsize(tmp) == 0:
                    os.unlink(tmp)
                    continue
                os.chmod(tmp, FILE_MODE)
                os.replace(tmp, target)
                done.append(target)
        except BaseException:
            for target in done:
                with contextlib.suppress(OSError):
                    target.unlink()
            self.discard()
            raise
        self.discard()

    def discard(self) -> None:
        for tmp, _ in self.pending:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for folder, _ in self.folders:
            shutil.rmtree(folder, ignore_errors=True)
        self.pending, self.folders = [], []

    def __enter__(self) -> "Outputs":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()  # after commit() nothing is pending


def write_error(e: OSError, flag: str = "output") -> ScenarioError | None:
    """A ScenarioError for an OSError that means the output cannot be written (disk full, read-only, ...)."""
    if e.errno not in WRITE_ERRNOS:
        return None
    name = f" {short(str(e.filename))}" if e.filename else ""
    return ScenarioError(flag, f"cannot write{name}: {e.strerror or e}")


def strict_json(obj, **kwargs) -> str:
    """json.dumps that refuses NaN and Infinity (not JSON) with a ScenarioError instead of printing them."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError as e:
        raise ScenarioError("--json", f"the result holds a number that is not finite ({e})",
                            "finite inputs; please report the scenario") from None
