"""Work an engine that decodes one generation at a time does once it has been idle a while.

The one-at-a-time llama.cpp engine computes an answer's next-turn opening this way (see
`TokenRequest.next_turn_opening`): after `OPENING_WAIT_S` with no generation, in a thread of its
own. A generation that starts before then cancels it; one that starts during it waits for it,
a pass of a few tokens."""

from __future__ import annotations

import threading
from collections.abc import Callable

from llmflow.engines.base import OPENING_WAIT_S


class IdleWork:
    """At most one piece of work pending. Its owner calls `settle` before it uses what the work
    would change (a generation, a save, closing)."""

    __slots__ = ("_timer",)

    def __init__(self) -> None:
        self._timer: threading.Timer | None = None

    def schedule(self, work: Callable[[], None]) -> None:
        """Run `work` once idle for `OPENING_WAIT_S`, in place of any work pending."""
        self.settle()
        timer = threading.Timer(OPENING_WAIT_S, work)
        timer.daemon = True
        timer.name = "llmflow-idle-work"
        self._timer = timer
        timer.start()

    def settle(self) -> None:
        """Cancel the pending work, or wait for it to end if it has begun."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            timer.join()
