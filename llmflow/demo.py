"""`make demo`: the whole loop in one run.

Logs the embedded model to a local MLflow store (sqlite, under `.demo/`), registers it, loads it
back by its registry URI, and streams an answer through `predict_stream` as the seed post does,
then prints time to first token and decode speed.

    python -m llmflow.demo [--prompt TEXT] [--max-tokens N] [--show-tokens] [--store DIR]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

REGISTERED_NAME = "llmflow-demo"
EXPERIMENT = "llmflow-demo"
DEFAULT_PROMPT = "What is MLflow? Answer in two sentences."


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # MLflow's first import on a fresh install takes a while (compiling its modules): say so first
    print("starting MLflow (its first import takes a few seconds on a fresh install)", flush=True)
    _quiet_mlflow()
    from mlflow.exceptions import MlflowException

    from llmflow.errors import LlmflowError

    store = Path(args.store).resolve()
    try:
        uri = log_demo_model(store, args.max_tokens)
        stream_demo_answer(uri, args.prompt, show_tokens=args.show_tokens)
    except (LlmflowError, MlflowException) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    db = store / "mlflow.db"
    print(f"\nsee it in the MLflow UI: mlflow ui --backend-store-uri sqlite:///{db}", file=sys.stderr)
    return 0


def log_demo_model(store: Path, max_tokens: int) -> str:
    """Log and register the embedded model; return its registry URI."""
    import mlflow

    from llmflow.mlflow import log_model

    store.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    _use_experiment(store)
    started = time.perf_counter()
    with mlflow.start_run(run_name="demo"):
        info = log_model(
            "model", registered_model_name=REGISTERED_NAME, default_params={"max_tokens": max_tokens}
        )
    uri = f"models:/{REGISTERED_NAME}/{info.registered_model_version}"
    print(f"[1/3] logged the embedded model in {time.perf_counter() - started:.1f} s: {uri}")
    return uri


def stream_demo_answer(uri: str, prompt: str, *, show_tokens: bool) -> None:
    import mlflow

    from llmflow.cli.common import print_stream
    from llmflow.mlflow.model import chunk_from_dict

    started = time.perf_counter()
    loaded = mlflow.pyfunc.load_model(uri)
    print(f"[2/3] loaded {uri} in {time.perf_counter() - started:.2f} s")
    print(f"[3/3] predict_stream({{'prompt': {prompt!r}}}):\n")
    # "trace": False keeps MLflow's one-time tracing imports out of the measured first token.
    chunks = loaded.predict_stream({"prompt": prompt}, params={"stop": "<|im_end|>", "trace": False})
    _, finish, timer = print_stream(map(chunk_from_dict, chunks), separator="|" if show_tokens else "")
    print(f"\n{timer.summary()} · finish: {finish.value if finish else 'n/a'}")


def _use_experiment(store: Path) -> None:
    """An experiment whose artifacts also live under the store (not in ./mlruns)."""
    import mlflow

    if mlflow.get_experiment_by_name(EXPERIMENT) is None:
        artifacts = store / "artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        mlflow.create_experiment(EXPERIMENT, artifact_location=artifacts.as_uri())
    mlflow.set_experiment(EXPERIMENT)


def _quiet_mlflow() -> None:
    """Keep the demo's output to the loop itself: no per-file download bars, no INFO logs."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow  # noqa: F401  (MLflow sets its loggers' levels when imported)

    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llmflow.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="what to ask")
    parser.add_argument("--max-tokens", type=int, default=96, help="tokens to generate at most")
    parser.add_argument("--show-tokens", action="store_true", help="put | between chunks, like the seed")
    parser.add_argument("--store", default=".demo", help="where the MLflow store lives (default: .demo)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
