"""Prompts from MLflow's prompt registry: a system prompt or chat template given as
`prompts:/NAME@ALIAS`, `prompts:/NAME/VERSION` (or `prompts:/NAME`, its latest version) is read
from the registry (`mlflow.genai.load_prompt`) instead of being the text itself.

A model's prompt (`LoadSpec.system_prompt` / `chat_template`) is resolved once when the model
loads: a prompt or alias that is not there fails the load (`PromptNotFound`). A system prompt or
chat template named by an alias (or by no version) is a `LivePrompt`: a thread of its own re-reads
it every `refresh_s` seconds, so moving the alias reaches the served model without a restart; a
failed re-read (or a new chat template that does not compile) keeps the last good version, with a
log line. A request's own `system_prompt` reference is
resolved for that request (a missing one: 400 naming `system_prompt`). Every answer knows the
version it used (`RegistryPrompt.uri`, `prompts:/NAME/VERSION`): the server names it in the trace
(`llmflow.prompt`) and in the answer's `llmflow-prompt` header.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from llmflow.errors import LlmflowError, PromptNotFound

logger = logging.getLogger(__name__)

PROMPT_SCHEME = "prompts:/"
#: prompts:/NAME, prompts:/NAME/VERSION, prompts:/NAME@ALIAS
_REFERENCE = re.compile(r"^prompts:/(?P<name>[^/@\s]+)(?:/(?P<version>\d+)|@(?P<alias>[^/@\s]+))?$")
_FORMS = "give prompts:/NAME, prompts:/NAME/VERSION or prompts:/NAME@ALIAS"
T = TypeVar("T")
#: how often a live prompt is re-read by default (seconds)
DEFAULT_REFRESH_S = 30.0


def is_reference(text: str | None) -> bool:
    """Whether `text` names a registry prompt rather than being the prompt."""
    return text is not None and text.startswith(PROMPT_SCHEME)


def is_live(reference: str) -> bool:
    """A reference whose version can change: an alias, or no version (the latest)."""
    found = _REFERENCE.match(reference)
    return found is not None and found.group("version") is None


@dataclass(frozen=True, slots=True)
class RegistryPrompt:
    """One version of a registry prompt, as read."""

    text: str
    name: str
    version: int
    #: what it was asked as (`prompts:/NAME@ALIAS`, ...)
    reference: str

    @property
    def uri(self) -> str:
        """The version itself: `prompts:/NAME/VERSION`."""
        return f"{PROMPT_SCHEME}{self.name}/{self.version}"


def read_prompt(reference: str, field: str) -> RegistryPrompt:
    """The prompt `reference` names, now; `PromptNotFound` naming `field` when it is not there."""
    if _REFERENCE.match(reference) is None:
        raise PromptNotFound(
            field, reference, "give prompts:/NAME, prompts:/NAME/VERSION or prompts:/NAME@ALIAS"
        )
    import mlflow.genai

    try:
        version = mlflow.genai.load_prompt(reference)
    except Exception as exc:  # MlflowException: no such prompt, version or alias; a store error
        raise PromptNotFound(field, reference, _first_line(exc)) from None
    if version is None:
        raise PromptNotFound(field, reference, "no such prompt")
    text = version.template
    if not isinstance(text, str):  # a chat prompt: a list of messages
        raise PromptNotFound(field, reference, "it is a chat prompt (messages); give a text prompt")
    return RegistryPrompt(text, version.name, int(version.version), reference)


def _first_line(exc: Exception) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return message.strip().splitlines()[0] if message.strip() else type(exc).__name__


class LivePrompt(Generic[T]):
    """A registry prompt kept current: read at creation (raising when it is not there), then
    re-read every `refresh_s` seconds by a thread of its own until `close()`. `parse` makes what
    a version's text is used as (a chat template's renderer); a version it refuses is kept out
    as a failed read is. `current` and `parsed` are always one whole version's, swapped in one
    assignment."""

    def __init__(
        self,
        reference: str,
        field: str,
        refresh_s: float = DEFAULT_REFRESH_S,
        parse: Callable[[str], T] | None = None,
    ):
        self.reference = reference
        self.field = field
        self.refresh_s = refresh_s
        self._parse = parse
        self._version = self._read()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llmflow-prompt-refresh", daemon=True)
        self._thread.start()

    @property
    def current(self) -> RegistryPrompt:
        return self._version[0]

    def snapshot(self) -> tuple[RegistryPrompt, T]:
        """The current version and its parsed form, of one version (a refresh may swap them)."""
        return self._version

    @property
    def parsed(self) -> T:
        """The current version as `parse` made it (its text without a `parse`)."""
        return self._version[1]

    def _read(self) -> tuple[RegistryPrompt, T]:
        found = read_prompt(self.reference, self.field)
        value = found.text if self._parse is None else self._parse(found.text)
        return found, value  # type: ignore[return-value]

    def _run(self) -> None:
        while not self._stop.wait(self.refresh_s):
            self.refresh()

    def refresh(self) -> None:
        """Re-read the prompt; on failure (not there, or refused by `parse`) keep the version in
        use, with a log line."""
        current = self.current
        try:
            found = self._read()
        except PromptNotFound as exc:
            logger.warning("keeping %s (version %s): %s", self.reference, current.version, exc.reason)
            return
        except (LlmflowError, ValueError) as exc:  # e.g. a chat template that does not compile
            logger.warning("keeping %s (version %s): %s", self.reference, current.version, exc)
            return
        if found[0].version != current.version:
            logger.info("%s now reads version %d (was %d)", self.reference, found[0].version, current.version)
        self._version = found

    def close(self) -> None:
        self._stop.set()


def prompt_source(
    text: str | None, field: str, refresh_s: float, parse: Callable[[str], T] | None = None
) -> str | RegistryPrompt | LivePrompt[T] | None:
    """A model's prompt (`field`) as given: the text itself, or the registry version it names
    (kept current when it names an alias or no version)."""
    if not is_reference(text):
        return text
    assert text is not None
    if is_live(text):
        return LivePrompt(text, field, refresh_s, parse)
    return read_prompt(text, field)


def system_prompt_source(text: str | None, refresh_s: float) -> str | RegistryPrompt | LivePrompt | None:
    """A model's system prompt as given (see `prompt_source`)."""
    return prompt_source(text, "system_prompt", refresh_s)
