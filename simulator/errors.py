"""The one exception for bad user input: the CLI turns it into one line on stderr and exit code 2."""


class ScenarioError(ValueError):
    """Bad input (scenario, model, topology, profile, override): names the key path, the problem, what is allowed."""

    def __init__(self, path: str, problem: str, allowed: str | None = None):
        self.path = path
        self.problem = problem
        self.allowed = allowed
        msg = f"{path}: {problem}" if path else problem
        if allowed:
            msg += f" (allowed: {allowed})"
        super().__init__(msg)

    def __reduce__(self):
        """Rebuilt from its three parts, so an error raised in a process pool's worker reaches the parent intact
        (the default pickling passes only the message and fails to rebuild it)."""
        return type(self), (self.path, self.problem, self.allowed)
