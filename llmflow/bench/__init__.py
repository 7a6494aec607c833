"""`llmflow bench`: vLLM-bench-style numbers (TTFT, ITL, TPOT, E2E, throughput) for any
OpenAI-compatible streaming endpoint, or for an llmflow model in this process.

    from llmflow.bench import BenchOptions, run_bench
    results = run_bench(BenchOptions(url="http://127.0.0.1:8080/v1", concurrency=(1, 4)))

The results document follows `llmflow.bench.schema.RESULTS`.
"""

from llmflow.bench.driver import BenchOptions, run_bench
from llmflow.bench.records import ErrorKind, OutputTokenSource, RequestRecord, RequestSpec
from llmflow.bench.report import markdown_table, plot, write_json
from llmflow.bench.schema import RESULTS, SCHEMA_VERSION

__all__ = [
    "RESULTS",
    "SCHEMA_VERSION",
    "BenchOptions",
    "ErrorKind",
    "OutputTokenSource",
    "RequestRecord",
    "RequestSpec",
    "markdown_table",
    "plot",
    "run_bench",
    "write_json",
]
