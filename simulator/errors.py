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
