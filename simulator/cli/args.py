"""Command-line arguments shared by the commands: `--set` overrides and the flags that stand for one."""
from __future__ import annotations


PROFILE_MISMATCH_SET = "cluster.allow_profile_mismatch=true"
"""The --set that --allow-profile-mismatch stands for."""


def overrides(args) -> list[str]:
    """The command's --set list, plus what --allow-profile-mismatch stands for."""
    return list(getattr(args, "set", None) or []) + ([PROFILE_MISMATCH_SET] if getattr(args, "allow_profile_mismatch", False) else [])
