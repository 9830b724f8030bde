"""What a pipeline schedule is made of: one `Action` per compute pass of one micro-batch through one chunk, and
`Lane`, the builder the schedules write a rank's list with (`plan/schedules.py`, `plan/dualpipe.py`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

KINDS = ("F", "B", "W")


@dataclass(frozen=True, slots=True)
class Action:
    """One compute pass of one micro-batch through one pipeline chunk."""
    kind: str
    """"F" forward, "B" input-grad backward, "W" weight-grad backward."""
    chunk: int
    """Pipeline chunk 0..pp*vpp-1 in pipeline order (chunk 0 holds the embedding, the last the loss; under DualPipe
    each model copy's first and last chunk, `layout.is_first_chunk` / `is_last_chunk`)."""
    mb: int
    """Micro-batch 0..m-1."""
    overlap: bool = field(default=False, compare=False)
    """An F run together with the B that follows it, each micro-batch's communication under the other's
    compute (DualPipe's overlapped forward-backward chunk, DeepSeek-V3 report §3.2.1 Fig. 4). Not part
    of the action's identity: the oracle and the dependency checks see the plain F and B."""


RankActions = Callable[[int, int, int, int], list[Action]]
"""(rank, pp, vpp, m) -> the rank's actions in execution order."""
RankOrder = Callable[[int, int, int, int], tuple[list["Action"], list[tuple[int, int]], int]]
"""(rank, pp, vpp, m) -> the rank's forwards in order, its backwards' (chunk, mb) in order, its warm-up forwards."""
RankInflight = Callable[[int, int, int, int], list[int]]
"""(rank, pp, vpp, m) -> per local chunk of the rank (local order), the micro-batches whose F has run and
whose B has not at the rank's peak."""


class Lane:
    """One rank's action list under construction: per-(kind, chunk) counters hand out micro-batch
    numbers in order (from `first[chunk]`, else 0), and W's of split backwards can wait in a queue (ZB's
    deferred W)."""
    __slots__ = ("actions", "_next", "_waiting", "_first")

    def __init__(self, first: dict[int, int] | None = None) -> None:
        self.actions: list[Action] = []
        self._next: dict[tuple[str, int], int] = {}
        self._waiting: list[Action] = []
        self._first = first or {}

    def _take(self, kind: str, chunk: int) -> int:
        mb = self._next.get((kind, chunk), self._first.get(chunk, 0))
        self._next[(kind, chunk)] = mb + 1
        return mb

    def f(self, chunk: int, overlap: bool = False) -> None:
        self.actions.append(Action("F", chunk, self._take("F", chunk), overlap))

    def b(self, chunk: int, defer_w: bool = False) -> None:
        mb = self._take("B", chunk)
        self.actions.append(Action("B", chunk, mb))
        (self._waiting if defer_w else self.actions).append(Action("W", chunk, mb))

    def w(self, chunk: int | None = None) -> bool:
        """Run the oldest waiting W (of `chunk` if given); False if none waits."""
        for i, a in enumerate(self._waiting):
            if chunk is None or a.chunk == chunk:
                self.actions.append(self._waiting.pop(i))
                return True
        return False

    def count(self, kind: str, chunk: int) -> int:
        """How many `kind` passes of `chunk` the lane holds so far."""
        return self._next.get((kind, chunk), self._first.get(chunk, 0)) - self._first.get(chunk, 0)
