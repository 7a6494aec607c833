"""Drives a backend through load levels: a fixed number of requests in flight (closed loop,
`concurrency`) or Poisson arrivals at a request rate (open loop, `request_rate`).

Results are appended to a `Sweep` as they arrive, so whatever ends the run early (a dead
server, Ctrl-C) leaves everything measured so far in it.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from llmflow.bench.records import RequestRecord, RequestSpec
from llmflow.bench.tokens import TokenCounter


class Backend(Protocol):
    """Something that runs one request and measures it; never raises for a failed request."""

    async def run(self, spec: RequestSpec) -> RequestRecord: ...

    async def aclose(self) -> None: ...


class ProgressSink(Protocol):
    def start_level(self, label: str, total: int) -> None: ...

    def advance(self, record: RequestRecord) -> None: ...

    def end_level(self) -> None: ...


class NoProgress:
    def start_level(self, label: str, total: int) -> None:
        pass

    def advance(self, record: RequestRecord) -> None:
        pass

    def end_level(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class Level:
    """One load level. Closed loop: `concurrency` requests always in flight. Open loop:
    `request_rate` arrivals per second (inf: all at once), at most `concurrency` in flight."""

    concurrency: int | None = None
    request_rate: float | None = None

    @property
    def label(self) -> str:
        if self.request_rate is None:
            return f"concurrency {self.concurrency}"
        cap = f", at most {self.concurrency} in flight" if self.concurrency else ""
        return f"rate {self.request_rate:g}/s{cap}"

    @property
    def key(self) -> str:
        """Seeds the level's prompts: the same level gets the same prompts on every run."""
        return f"c{self.concurrency}" if self.request_rate is None else f"r{self.request_rate:g}"


@dataclass
class LevelResult:
    level: Level
    started_at: float
    ended_at: float | None = None
    records: list[RequestRecord] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        end = self.ended_at
        if end is None:  # interrupted: up to the last request that finished
            end = max((r.ended_at for r in self.records if r.ended_at is not None), default=self.started_at)
        return end - self.started_at


@dataclass
class Sweep:
    levels: list[LevelResult] = field(default_factory=list)
    warmup: RequestRecord | None = None
    #: why the sweep stopped early, None when it ran to the end
    aborted: str | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    levels: Sequence[tuple[Level, Sequence[RequestSpec]]]
    warmup: RequestSpec | None = None
    seed: int = 0


async def run_sweep(
    backend: Backend,
    plan: Plan,
    sweep: Sweep,
    progress: ProgressSink | None = None,
    counter: TokenCounter | None = None,
) -> Sweep:
    """Run every level in order. Stops when the warm-up request fails or when every request
    of a level failed: the server is down or broken, and more requests would only repeat it."""
    progress = progress or NoProgress()
    if plan.warmup is not None:
        sweep.warmup = await backend.run(plan.warmup)
        if counter is not None:
            counter.fill([sweep.warmup])
        if sweep.warmup.error is not None:
            sweep.aborted = f"the warm-up request failed: {sweep.warmup.error.message}"
            return sweep
    for level, specs in plan.levels:
        result = LevelResult(level, started_at=time.perf_counter())
        sweep.levels.append(result)
        progress.start_level(level.label, len(specs))
        try:
            await run_level(backend, result, specs, progress, seed=plan.seed)
        finally:
            progress.end_level()
        if counter is not None:
            counter.fill(result.records)
        failure = _all_failed(result)
        if failure is not None:
            sweep.aborted = f"every request at {level.label} failed, the sweep stopped: {failure}"
            break
    return sweep


async def run_level(
    backend: Backend, result: LevelResult, specs: Sequence[RequestSpec], progress: ProgressSink, *, seed: int
) -> None:
    level = result.level

    async def one(spec: RequestSpec) -> None:
        record = await backend.run(spec)
        result.records.append(record)
        progress.advance(record)

    result.started_at = time.perf_counter()
    if level.request_rate is None:
        await _closed_loop(one, specs, level.concurrency or 1)
    else:
        rng = random.Random(f"{seed}:{level.key}:arrivals")
        await _open_loop(one, specs, level.request_rate, level.concurrency, rng)
    result.ended_at = time.perf_counter()


async def _closed_loop(one, specs: Sequence[RequestSpec], concurrency: int) -> None:
    pending = iter(specs)

    async def worker() -> None:
        for spec in pending:  # one event loop: workers share the iterator safely
            await one(spec)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(specs)))))


async def _open_loop(
    one, specs: Sequence[RequestSpec], rate: float, cap: int | None, rng: random.Random
) -> None:
    limit = asyncio.Semaphore(cap) if cap else None

    async def limited(spec: RequestSpec) -> None:
        if limit is None:
            await one(spec)
            return
        async with limit:
            await one(spec)

    tasks = []
    try:
        for position, spec in enumerate(specs):
            tasks.append(asyncio.create_task(limited(spec)))
            if position < len(specs) - 1 and not math.isinf(rate):
                await asyncio.sleep(rng.expovariate(rate))
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()


def _all_failed(result: LevelResult) -> str | None:
    if not result.records or any(r.ok for r in result.records):
        return None
    last = result.records[-1].error
    return last.message if last else "unknown error"
