"""What one server serves: one `ModelConfig` per model, from `llmflow serve`'s MODEL arguments or
from a config file (YAML or TOML) with a list of `models`:

    models:
      - name: chat                 # default: derived from `model`, as for a single model
        model: models:/chat/1      # MODEL as on the command line (hf://ORG/REPO:QUANT too);
                                   # omitted: the embedded model
        engine: llama_cpp_batched
        engine_options: {n_ctx: 4096}
        parallel: 4
        threads: 2
        max_running: 4             # this model's own admission limits (default: the server's)
        max_queue: 16
        system_prompt: prompts:/assistant@production   # or the text itself
        prompt_refresh_s: 30       # how often a registry alias is re-read
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmflow.errors import FieldProblem, InvalidParams

if TYPE_CHECKING:
    from llmflow.server.served import ServedModel


class ModelConfig(BaseModel):
    """How to load one served model, and its own limits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str | None = Field(None, min_length=1, description="the name clients send as 'model'")
    model: str | None = Field(
        None, description="a model URI, an MLflow model directory, weights or a Hub model (hf://...)"
    )
    engine: str | None = None
    engine_options: dict[str, Any] = Field(default_factory=dict)
    parallel: int | None = Field(None, ge=1)
    threads: int | None = Field(None, ge=1)
    max_running: int | None = Field(None, ge=1, description="default: the server's --max-running")
    max_queue: int | None = Field(None, ge=0, description="default: the server's --max-queue")
    system_prompt: str | None = Field(
        None, description="the default system prompt, or a registry prompt (prompts:/NAME@ALIAS)"
    )
    prompt_refresh_s: float | None = Field(None, gt=0, le=86400, description="re-read a registry alias")

    def load(self) -> ServedModel:
        """Load it, named `name` (when given) or as the single-model server names its model."""
        from llmflow.server.served import load_served

        prompts = {"system_prompt": self.system_prompt, "prompt_refresh_s": self.prompt_refresh_s}
        return load_served(
            self.model,
            name=self.name,
            engine=self.engine,
            engine_options=self.engine_options,
            parallel=self.parallel,
            threads=self.threads,
            **{key: value for key, value in prompts.items() if value is not None},
        )

    def expected_name(self) -> str:
        """Its name without loading it: `name`, or what `load()` would name it."""
        if self.name is not None:
            return self.name
        from llmflow.mlflow.model_ref import parse_model_ref
        from llmflow.model_files import model_name_of, resolve_model_path

        ref = parse_model_ref(self.model)
        if ref.logged or ref.hub is not None:  # a Hub model goes by its reference, downloaded or not
            return ref.name
        return model_name_of(resolve_model_path(ref.location))

    def local_path(self) -> Path | None:
        """The weights file or model directory it loads from (the embedded model's when `model`
        is None); None for a model in a tracking server (`models:/`, `runs:/`), not downloaded
        until it loads."""
        from llmflow.mlflow.model_ref import parse_model_ref

        ref = parse_model_ref(self.model)
        if not ref.logged:
            from llmflow.model_files import resolve_model_path

            return resolve_model_path(ref.location)
        path = Path(str(ref.location))
        return path if path.is_dir() else None


def check_unique(names: Iterable[str]) -> None:
    """Two models of one server may not share a name: clients could reach only one of them."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidParams.single(
                "model name",
                f"{name!r} names two models; give each a name of its own (a config file's 'name')",
            )
        seen.add(name)


def read_config_file(path: Path) -> list[ModelConfig]:
    """The `models` of a YAML (.yaml, .yml) or TOML (.toml) file; a bad entry is named by its place."""
    data = _parse(path)
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, list) or not models:
        raise InvalidParams.single("config", f"{str(path)!r} needs a non-empty list 'models'")
    extra = set(data) - {"models"}
    if extra:
        raise InvalidParams.single("config", f"unknown keys {sorted(extra)} (only 'models')")
    return parse_models(models)


def parse_models(entries: Sequence[Any]) -> list[ModelConfig]:
    configs: list[ModelConfig] = []
    problems: list[FieldProblem] = []
    for i, entry in enumerate(entries):
        try:
            configs.append(ModelConfig.model_validate(entry))
        except ValidationError as exc:
            for error in exc.errors():
                where = ".".join(str(part) for part in error["loc"])
                field = f"models[{i}]" + (f".{where}" if where else "")
                problems.append(FieldProblem(field, error["msg"].lower()))
    if problems:
        raise InvalidParams(problems)
    return configs


def _parse(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidParams.single("config", f"cannot read {str(path)!r}: {exc.strerror}") from None
    suffix = path.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            import yaml

            return yaml.safe_load(text)
        if suffix == ".toml":
            return _toml().loads(text)
    except Exception as exc:  # yaml.YAMLError, tomllib.TOMLDecodeError
        raise InvalidParams.single("config", f"{str(path)!r} does not parse: {exc}") from None
    raise InvalidParams.single("config", f"{str(path)!r}: give a .yaml, .yml or .toml file")


def _toml() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    try:
        import tomli
    except ImportError:
        raise InvalidParams.single("config", "TOML needs Python 3.11 or the tomli package") from None
    return tomli
