"""`make demo` (`python -m llmflow.demo`): log, load by URI and stream, in one fresh process."""

from __future__ import annotations

import subprocess
import sys


def test_the_demo_runs_the_whole_loop(tmp_path):
    store = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "llmflow.demo", "--store", str(store), "--max-tokens", "8", "--show-tokens"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "[1/3] logged the embedded model" in out
    assert "[2/3] loaded models:/llmflow-demo/1" in out
    assert "[3/3] predict_stream" in out
    assert "time to first token" in out and "finish:" in out
    assert "|" in out
    assert (store / "mlflow.db").is_file()
    assert not (tmp_path / "mlruns").exists()  # artifacts stay under the store
