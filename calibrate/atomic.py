"""Write a file so that readers see the old contents or the new, never half of either.

The text goes to a temporary file in the same directory (same file system, so the rename is atomic),
is flushed and fsynced, and then `os.replace`s the target. Any failure on the way, a crash mid-write
included, removes the temporary file and leaves the old target untouched.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

DEFAULT_MODE = 0o644


def write_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    mode = path.stat().st_mode & 0o777 if path.exists() else DEFAULT_MODE
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable where the platform allows
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
