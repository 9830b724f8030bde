"""`cluster.cudnn_version`: a cuDNN release as a scenario writes it (the input side of `cost/cudnn_release.py`,
which picks the published attention points of that release)."""
from __future__ import annotations

import re

from .errors import ScenarioError

RELEASE_PATTERN = re.compile(r"^\d+\.\d+(\.\d+)?$")
"""A cuDNN release as its version string: major.minor or major.minor.patch (torch.backends.cudnn.version() 91002 is
9.10.2: major * 10,000 + minor * 100 + patch from cuDNN 9 on). A string: YAML reads an unquoted 9.10 as the number
9.1."""


def release(text: str, where: str = "cudnn_version") -> tuple[int, ...]:
    """'9.10.2' -> (9, 10, 2); '9.10' -> (9, 10). A bad string is a ScenarioError at `where`."""
    if not isinstance(text, str) or not RELEASE_PATTERN.match(text):
        raise ScenarioError(where, f"{text!r} is not a cuDNN release",
                            "a quoted string major.minor or major.minor.patch, e.g. '9.10.2', which "
                            "torch.backends.cudnn.version() prints as 91002")
    return tuple(int(x) for x in text.split("."))
