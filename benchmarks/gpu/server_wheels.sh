#!/usr/bin/env bash
# The wheels `llmflow serve` and `llmflow bench` need on the GPU machine beyond its image (which
# has numpy, torch, httpx, jinja2, typer, rich, uvloop, prometheus-client, ... but not the web
# stack or MLflow; Pillow too, which llmflow reads images with), at the versions installed here, for
# the machine's Python 3.12:
#
#   server_wheels.sh PYTHON DEST      # here, e.g. server_wheels.sh .venv/bin/python .whl  (~12 MB)
#   run_h200.sh wheels DEST WORK      # there: installs them into WORK/site beside the build
set -euo pipefail
python=$1 dest=$2
PACKAGES=(
    fastapi starlette pydantic pydantic-core annotated-types typing-inspection uvicorn httptools
    diskcache mlflow-skinny mlflow-tracing databricks-sdk opentelemetry-api opentelemetry-sdk
    opentelemetry-proto opentelemetry-semantic-conventions cachetools sqlparse python-multipart
    importlib-metadata google-auth pyasn1-modules pyasn1 python-dotenv greenlet
    pillow
)
pinned=()
for name in "${PACKAGES[@]}"; do
    version=$("$python" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")
    pinned+=("$name==$version")
done
mkdir -p "$dest"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d "$dest" "${pinned[@]}"
ls "$dest"
