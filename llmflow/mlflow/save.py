"""Saving an llmflow model in MLflow's format: models-from-code, the weights as an artifact.

The saved directory holds `model_code.py` (no pickled object), an MLmodel whose `model_config`
says how to rebuild the LLM (engine, engine options, prompt format, default params), the
signature, pinned pip requirements, and the weights under `artifacts/` (MLflow's artifact
`"model"`), copied once with a progress bar for large files.

Reference mode (`by_reference=True`) records the weights' absolute local path instead of copying
them: logging is instant and needs no extra disk, but the model only loads where that path
exists with the same files, and MLflow cannot move or serve it anywhere else.

A Hub model (`hf://...`) is downloaded first; the model's metadata (`hf_hub`) records its repo,
revision, commit and each file's checksum, so a registered model says which upstream weights it
holds. A split GGUF's other parts and an mmproj file are copied next to the first part.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmflow import __version__
from llmflow.engines import engine_class, guess_engine
from llmflow.errors import InvalidParams
from llmflow.llm import with_projector
from llmflow.load_spec import LoadSpec
from llmflow.mlflow.config import LORA_ARTIFACT, PROJECTOR_ARTIFACT, WEIGHTS_ARTIFACT, ModelSpec
from llmflow.mlflow.requirements import default_requirements
from llmflow.mlflow.signature import INPUT_EXAMPLE, OUTPUT_PARAMS, build_signature
from llmflow.mlflow.weights import copy_weights
from llmflow.model_files import model_name_of, parse_model_ref, resolve_model_path

#: the default interface: `{"prompt"}` / `{"messages"}` in, `{"content"}` chunk dicts out
CHUNKS = "chunks"
#: MLflow's `ResponsesAgent` interface (`responses_agent.py`)
RESPONSES = "responses"
INTERFACES = (CHUNKS, RESPONSES)
#: the code MLflow runs to build the model, per interface (models-from-code)
MODEL_CODE = {
    CHUNKS: Path(__file__).with_name("model_code.py"),
    RESPONSES: Path(__file__).with_name("responses_agent_code.py"),
}


@dataclass(frozen=True)
class ModelSource:
    """What to save: a validated spec and where its weights are now."""

    spec: ModelSpec
    weights: Path
    interface: str = CHUNKS
    #: the files that go with the weights: a split GGUF's other parts and an mmproj file (copied
    #: beside it), or a Hub model directory's chosen files (copied into it, and only they)
    companions: tuple[Path, ...] = ()
    #: what the model metadata records of a Hub model's upstream weights
    hub: dict[str, Any] | None = None


def model_source(
    model: str | Path | None = None,
    *,
    by_reference: bool = False,
    tracing: bool | None = None,
    interface: str = CHUNKS,
    lora: Mapping[str, str | Path] | None = None,
    **options: Any,
) -> ModelSource:
    """Check everything that can be checked without loading the weights, and describe the model.
    `options` are the fields of `LoadSpec`; `default_params` may also hold the structured output
    params (json_schema, tools, ...), recorded as the signature's defaults.

    Raises llmflow errors (`ModelNotFound`, `UnknownEngine`, `InvalidParams`, `ChatTemplateError`)."""
    if interface not in INTERFACES:
        raise InvalidParams.single("interface", f"must be one of {', '.join(INTERFACES)}; got {interface!r}")
    weights, companions, hub = _weights(model)
    params = dict(options.pop("default_params", None) or {})
    output = {name: params.pop(name) for name in OUTPUT_PARAMS if name in params}
    load = LoadSpec.parse({**options, "default_params": params})
    engine = load.engine or guess_engine(weights)
    engine_class(engine)  # an unknown engine fails now, not when the model is loaded
    fields = load.model_dump(exclude_unset=True)
    projector, fields["engine_options"] = _projector(engine, fields.get("engine_options") or {}, model)
    spec = ModelSpec.parse(
        {
            **fields,
            "engine": engine,
            "llmflow_version": __version__,
            "model_name": hub["reference"] if hub else model_name_of(weights),
            "default_output": output or None,
            "weights_path": str(weights) if by_reference else None,
            "tracing": tracing,
            "lora": _adapters(lora, engine) or None,
            "projector": str(projector) if projector is not None else None,
        }
    )
    return ModelSource(spec, weights, interface, tuple(c for c in companions if c != projector), hub)


def _projector(
    engine: str, options: dict[str, Any], model: str | Path | None
) -> tuple[Path | None, dict[str, Any]]:
    """The vision projector that travels with the model (as `ModelSpec.projector`, checked to
    exist) and the engine options without it: the one the engine loads (`llm.with_projector`: the
    file its projector option names, else the one a Hub model brings along)."""
    option = engine_class(engine).projector_option
    if option is None:
        return None, options
    rest = dict(with_projector(engine, options, model))
    named = rest.pop(option, None)
    if named is None:
        return None, rest
    path = Path(str(named)).expanduser()
    if not path.is_file():
        raise InvalidParams.single(f"engine_options.{option}", f"no projector file at {str(named)!r}")
    return path.absolute(), rest  # not resolved: a Hub file is a link whose name is the file's


def _adapters(lora: Mapping[str, str | Path] | None, engine: str) -> dict[str, str]:
    """LoRA adapters to log with the model, name -> local file or directory, as the engine loads
    them (copied as artifacts `lora.NAME` unless the model is logged by reference); checked to
    exist, their names to be plain."""
    if not lora:
        return {}
    kind = engine_class(engine).lora_format
    if kind is None:
        raise InvalidParams.single("lora", f"the {engine} engine does not apply LoRA adapters")
    found: dict[str, str] = {}
    for name, path in lora.items():
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise InvalidParams.single(
                "lora", f"{name!r}: an adapter's name is letters, digits, '_', '.', '-'"
            )
        where = Path(path).expanduser().resolve()
        if kind == "gguf" and not where.is_file():
            raise InvalidParams.single("lora", f"{name!r}: no GGUF adapter file {str(path)!r}")
        if kind == "peft" and not (where / "adapter_config.json").is_file():
            raise InvalidParams.single(
                "lora", f"{name!r}: no PEFT adapter directory (with adapter_config.json) at {str(path)!r}"
            )
        found[name] = str(where)
    return found


def _weights(model: str | Path | None) -> tuple[Path, tuple[Path, ...], dict[str, Any] | None]:
    """The weights' local path, their companion files and, for a Hub model, its provenance. A Hub
    model's cached files are links into the cache's blobs: kept as links, so names stay names."""
    ref = parse_model_ref(model)
    if ref.hub is None:
        return resolve_model_path(model).resolve(), (), None
    from llmflow.hub import fetch

    fetched = fetch(ref.hub)
    return fetched.path.absolute(), fetched.companions, fetched.provenance()


def save_model(
    path: str | Path,
    model: str | Path | None = None,
    *,
    pip_requirements: list[str] | None = None,
    extra_pip_requirements: list[str] | None = None,
    input_example: Any = INPUT_EXAMPLE,
    metadata: dict[str, Any] | None = None,
    progress: bool | None = None,
    mlflow_model: Any = None,
    **options: Any,
) -> None:
    """Save an llmflow model to a local directory `path` (which must not exist or be empty).

    `model` is a model file or directory (default: the embedded SmolLM2-135M-Instruct GGUF).
    `options` are those of `model_source`: the fields of `LoadSpec` (engine, engine_options,
    threads, parallel, chat_template, prompt_map, pre_prompt, post_prompt, default_params,
    system_prompt), by_reference, tracing (True: record an MLflow trace of every call; False:
    never; None: only when an MLflow experiment is set), and interface: "chunks" (the default:
    `{"prompt"}` in, `{"content"}` chunks out) or "responses" (an MLflow `ResponsesAgent`).
    """
    source = model_source(model, **options)
    save_source(
        path,
        source,
        pip_requirements=pip_requirements,
        extra_pip_requirements=extra_pip_requirements,
        input_example=input_example,
        metadata=metadata,
        progress=progress,
        mlflow_model=mlflow_model,
    )


def save_source(
    path: str | Path,
    source: ModelSource,
    *,
    pip_requirements: list[str] | None = None,
    extra_pip_requirements: list[str] | None = None,
    input_example: Any = INPUT_EXAMPLE,
    metadata: dict[str, Any] | None = None,
    progress: bool | None = None,
    mlflow_model: Any = None,
) -> None:
    import mlflow
    from mlflow.models import Model

    spec = source.spec
    mlflow_model = mlflow_model if mlflow_model is not None else Model()
    if source.hub is not None:
        metadata = {**(metadata or {}), "hf_hub": source.hub}
    requirements = pip_requirements
    if requirements is None:
        requirements = default_requirements(spec.engine) + list(extra_pip_requirements or [])
    mlflow.pyfunc.save_model(
        str(path),
        python_model=str(MODEL_CODE[source.interface]),
        pip_requirements=requirements,
        metadata=metadata,
        mlflow_model=mlflow_model,
        streamable=True,
        **_interface_arguments(source, input_example),
    )
    if not spec.by_reference:
        _add_weights_artifact(Path(path), source, mlflow_model, progress)


def _interface_arguments(source: ModelSource, input_example: Any) -> dict[str, Any]:
    """The chunk interface has llmflow's signature. MLflow sets a ResponsesAgent's signature
    itself, and checks the model at once by answering the input example: it then reads the
    weights where they are now (the config saved afterwards no longer names that path)."""
    spec = source.spec
    if source.interface == CHUNKS:
        return {
            "model_config": spec.to_config(),
            "signature": build_signature(spec.sampling_params, spec.system_prompt, spec.default_output),
            "input_example": input_example,
        }
    from llmflow.mlflow.responses_agent import INPUT_EXAMPLE as RESPONSES_EXAMPLE

    config = spec.to_config()
    if not spec.by_reference:
        config["weights_path"] = str(source.weights)
    example = RESPONSES_EXAMPLE if input_example is INPUT_EXAMPLE else input_example
    return {"model_config": config, "input_example": example}


def _add_weights_artifact(path: Path, source: ModelSource, mlflow_model: Any, progress: bool | None) -> None:
    """Copy the weights into `artifacts/`, record them as the pyfunc artifact "model", and the
    model's config (which then names no local path).

    Done here rather than by MLflow's `artifacts=` argument, which copies through a staging
    directory without progress; the MLmodel entry is the same one MLflow writes."""
    from mlflow.models.model import MLMODEL_FILE_NAME
    from mlflow.pyfunc import FLAVOR_NAME, MODEL_CONFIG
    from mlflow.pyfunc.model import (
        CONFIG_KEY_ARTIFACT_RELATIVE_PATH,
        CONFIG_KEY_ARTIFACT_URI,
        CONFIG_KEY_ARTIFACTS,
    )

    weights = source.weights
    relative, copies = _weight_copies(source)
    for file, target in copies:
        copy_weights(file, path / target, progress=progress)
    flavor = mlflow_model.flavors[FLAVOR_NAME]
    flavor[MODEL_CONFIG] = source.spec.to_config()
    flavor[CONFIG_KEY_ARTIFACTS] = {
        WEIGHTS_ARTIFACT: {
            CONFIG_KEY_ARTIFACT_RELATIVE_PATH: relative.as_posix(),
            CONFIG_KEY_ARTIFACT_URI: str(weights),
        }
    }
    if source.spec.projector is not None:  # so does a vision model's projector
        target = Path("artifacts", "projector", Path(source.spec.projector).name)
        copy_weights(Path(source.spec.projector), path / target, progress=progress)
        flavor[MODEL_CONFIG]["projector"] = target.as_posix()
        flavor[CONFIG_KEY_ARTIFACTS][PROJECTOR_ARTIFACT] = {
            CONFIG_KEY_ARTIFACT_RELATIVE_PATH: target.as_posix(),
            CONFIG_KEY_ARTIFACT_URI: source.spec.projector,
        }
    for name, file in (source.spec.lora or {}).items():  # LoRA adapters travel with the model
        target = Path("artifacts", "lora", name if Path(file).is_dir() else f"{name}.gguf")
        copy_weights(Path(file), path / target, progress=progress)
        flavor[MODEL_CONFIG]["lora"][name] = target.as_posix()  # no local path in the MLmodel
        flavor[CONFIG_KEY_ARTIFACTS][f"{LORA_ARTIFACT}{name}"] = {
            CONFIG_KEY_ARTIFACT_RELATIVE_PATH: target.as_posix(),
            CONFIG_KEY_ARTIFACT_URI: str(file),
        }
    mlflow_model.model_size_bytes = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    mlflow_model.save(str(path / MLMODEL_FILE_NAME))


def _weight_copies(source: ModelSource) -> tuple[Path, list[tuple[Path, Path]]]:
    """The weights' place under `artifacts/` and what to copy where: the weights (a file or a
    whole directory) and their companions beside a file; a Hub model directory's chosen files
    alone, under its repo's name (its cached folder is named by a commit, and may hold others)."""
    weights = source.weights
    if weights.is_dir() and source.companions and source.hub is not None:
        relative = Path("artifacts", source.hub["repo"].split("/")[-1])
        return relative, [(file, relative / file.name) for file in source.companions]
    relative = Path("artifacts", weights.name)
    return relative, [
        (weights, relative),
        *((file, relative.parent / file.name) for file in source.companions),
    ]
