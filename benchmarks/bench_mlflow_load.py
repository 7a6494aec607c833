"""Load time of a logged llmflow model through `mlflow.pyfunc.load_model`.

The embedded model logged once to a sqlite tracking store (and saved to a directory), then loaded
in this process from the directory and from the registry (`models:/name@alias` copies the
artifacts first), in fresh processes (imports timed apart), and with `LLM.load` (the engine's
share); kinds alternate. The default model should load in at most 1 s once its files are local.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import mlflow

from benchmarks.record import Recording, alternated, spread
from benchmarks.suite import parser
from llmflow import LLM

REGISTERED = "bench-load"

CHILD = textwrap.dedent(
    """
    import json, sys, time
    started = time.perf_counter()
    import mlflow.pyfunc
    import llmflow.mlflow
    imported = time.perf_counter()
    model = mlflow.pyfunc.load_model(sys.argv[1])
    loaded = time.perf_counter()
    first = next(iter(model.predict_stream({"prompt": "Hi"}, params={"max_tokens": 1})))
    streamed = time.perf_counter()
    print(json.dumps({"import_s": imported - started, "load_s": loaded - imported,
                      "first_chunk_s": streamed - loaded}))
    """
)


def log_once(root: Path) -> dict[str, str]:
    """Log (and register) the embedded model; also save it to a local directory."""
    import llmflow.mlflow

    uri = f"sqlite:///{root / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.create_experiment("bench", artifact_location=(root / "artifacts").as_uri())
    started = time.perf_counter()
    with mlflow.start_run(experiment_id=experiment):
        info = llmflow.mlflow.log_model("model", registered_model_name=REGISTERED)
    log_s = time.perf_counter() - started
    mlflow.MlflowClient().set_registered_model_alias(REGISTERED, "bench", info.registered_model_version)
    local = root / "saved"
    started = time.perf_counter()
    llmflow.mlflow.save_model(local, progress=False)
    save_s = time.perf_counter() - started
    return {"tracking_uri": uri, "registry": f"models:/{REGISTERED}@bench", "local": str(local),
            "log_s": f"{log_s:.3f}", "save_s": f"{save_s:.3f}"}  # fmt: skip


def time_in_process(loaders: dict[str, Callable[[], object]], runs: int) -> dict[str, list[float]]:
    """Every loader `runs` times, alternated (the first one rotates each round), after a warm-up each."""
    from llmflow.mlflow import find_llm

    def once(load: Callable[[], object]) -> float:
        started = time.perf_counter()
        model = load()
        elapsed = time.perf_counter() - started
        (find_llm(model) or model).close()  # LLM.load returns the LLM itself
        return elapsed

    return alternated({name: partial(once, load) for name, load in loaders.items()}, runs)


def time_fresh_processes(uris: dict[str, str], tracking_uri: str, runs: int) -> dict[str, list[dict]]:
    """A fresh process per load, the kinds alternated."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri}  # main() turned the progress bar off

    def once(uri: str) -> dict[str, float]:
        started = time.perf_counter()
        command = [sys.executable, "-c", CHILD, uri]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        record = json.loads(done.stdout.strip().splitlines()[-1])
        record["process_s"] = time.perf_counter() - started
        return record

    return alternated({name: partial(once, uri) for name, uri in uris.items()}, runs, warm_up=False)


def main() -> None:
    # --runs: in-process loads per kind; --processes: fresh-process loads per kind
    args = parser(__doc__, "benchmarks/results/mlflow_load.json", runs=7, processes=5).parse_args()
    recording = Recording.begin("mlflow_load")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    with tempfile.TemporaryDirectory() as tmp:
        logged = log_once(Path(tmp))
        uris = {kind: logged[kind] for kind in ("local", "registry")}
        loaders = {kind: partial(mlflow.pyfunc.load_model, uri) for kind, uri in uris.items()}
        in_process = time_in_process({**loaders, "llm_load": LLM.load}, args.runs)
        fresh = time_fresh_processes(uris, logged["tracking_uri"], args.processes)
    config = {"model": "SmolLM2-135M-Instruct.Q4_1 (embedded)", "runs": args.runs,
              "processes": args.processes}  # fmt: skip
    summary = {
        "log_model_s": float(logged["log_s"]),
        "save_model_s": float(logged["save_s"]),
        "in_process_s": {kind: spread(times) for kind, times in in_process.items()},
        "fresh_process_s": {kind: {key: spread(r[key] for r in records) for key in records[0]}
                            for kind, records in fresh.items()},
        "targets": {"in_process_s": "<= 1"},
    }  # fmt: skip
    samples = {"in_process_s": in_process, "fresh_process": fresh}
    recording.write(args.out, config=config, samples=samples, summary=summary)


if __name__ == "__main__":
    main()
