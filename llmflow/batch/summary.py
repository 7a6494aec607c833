"""What a batch run reports when it is done: rows, errors, tokens and throughput."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchSummary:
    rows: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Output (completion) tokens per second."""
        return self.completion_tokens / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        errors = f" ({self.errors} with an error)" if self.errors else ""
        return (
            f"{self.rows} rows{errors} · {self.completion_tokens} output tokens · {self.seconds:.1f} s · "
            f"{self.rows_per_s:.2f} rows/s · {self.tokens_per_s:.1f} output tok/s"
        )
