"""llmflow's errors. Each carries its data as attributes so callers (HTTP, CLI, MLflow) map
them by type, never by message text."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class LlmflowError(Exception):
    """Base class of every error llmflow raises on purpose."""

    #: OpenAI-style error code; the HTTP layer maps errors to status codes by class.
    code: str = "llmflow_error"
    #: the request field at fault, when there is one
    param: str | None = None


@dataclass(frozen=True)
class FieldProblem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class InvalidRequest(LlmflowError):
    """Bad input from a caller: params, messages or prompt. Names every field at fault."""

    code = "invalid_request"

    def __init__(self, problems: list[FieldProblem]):
        self.problems = problems
        self.param = problems[0].field if problems else None
        fields = ", ".join(p.field for p in problems)
        details = "; ".join(str(p) for p in problems)
        super().__init__(f"invalid {fields}: {details}")

    @classmethod
    def single(cls, field: str, message: str) -> InvalidRequest:
        return cls([FieldProblem(field, message)])


@contextmanager
def valid_unicode(field: str) -> Iterator[None]:
    """Text with a lone surrogate cannot be encoded for the model: the caller's fault, by field."""
    try:
        yield
    except UnicodeEncodeError:
        raise InvalidRequest.single(
            field, "holds text that is not valid Unicode (a lone surrogate)"
        ) from None


class InvalidParams(InvalidRequest):
    code = "invalid_params"


class InvalidMessages(InvalidRequest):
    code = "invalid_messages"


class InvalidImage(InvalidRequest):
    """An image in a request that cannot be read: not base64, not an image, over a limit, or a
    URL this server may not or could not fetch; `field` names where it was given."""

    code = "invalid_image"

    def __init__(self, field: str, reason: str):
        super().__init__([FieldProblem(field, reason)])


class UnsupportedInput(InvalidRequest):
    """Input of a kind the model does not take (an image for a text-only model), by field."""

    code = "unsupported_input"

    def __init__(self, field: str, reason: str):
        super().__init__([FieldProblem(field, reason)])


class InvalidConstraint(InvalidRequest):
    """An output constraint (JSON Schema, regex, grammar) that cannot be compiled: names the field
    and what the constraint library refused (an unsupported keyword, a bad pattern)."""

    code = "invalid_constraint"

    def __init__(self, field: str, reason: str):
        super().__init__([FieldProblem(field, f"cannot be used as an output constraint: {reason}")])


class PromptNotFound(InvalidRequest):
    """A reference to MLflow's prompt registry (`prompts:/NAME@ALIAS`) that it cannot answer: no
    such prompt, version or alias, or a malformed reference; `field` names where it was given."""

    code = "prompt_not_found"

    def __init__(self, field: str, reference: str, reason: str):
        self.reference = reference
        self.reason = reason
        super().__init__(
            [
                FieldProblem(
                    field, f"the prompt {reference!r} cannot be read from MLflow's prompt registry: {reason}"
                )
            ]
        )


class ContextLengthExceeded(LlmflowError):
    code = "context_length_exceeded"
    param = "messages"

    def __init__(self, prompt_tokens: int, n_ctx: int):
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx
        super().__init__(
            f"the prompt has {prompt_tokens} tokens but the model's context window is {n_ctx} "
            "tokens (and at least one token must be left to generate); shorten the prompt or "
            "load the model with a larger n_ctx"
        )


class ChatTemplateError(LlmflowError):
    """A chat template that does not parse, fails to render, or tries something unsafe."""

    code = "chat_template_error"


class ModelNotFound(LlmflowError):
    code = "model_not_found"

    def __init__(self, message: str):
        super().__init__(message)


class UnknownModel(ModelNotFound):
    """A request naming a model the server does not serve (`model`, or a serving endpoint's name)."""

    param = "model"

    def __init__(self, name: str, served: list[str]):
        self.name = name
        self.served = served
        serves = ", ".join(repr(model) for model in served)
        super().__init__(f"the model {name!r} is not served here; this server serves {serves}")


class UnknownAdapter(ModelNotFound):
    """A request for a LoRA adapter the model has not loaded (`lora`, or `model` as BASE:ADAPTER)."""

    param = "lora"

    def __init__(self, name: str, loaded: list[str], field: str = "lora"):
        self.name = name
        self.loaded = loaded
        self.param = field
        have = ", ".join(repr(n) for n in loaded) or "none"
        super().__init__(f"{field}: no LoRA adapter {name!r} is loaded on this model (loaded: {have})")


class AdapterLoadFailed(InvalidRequest):
    """A LoRA adapter file that could not be loaded: missing, or not an adapter of this model's shape."""

    code = "adapter_load_failed"

    def __init__(self, name: str, path: str, reason: str):
        self.name = name
        self.path = path
        super().__init__([FieldProblem("lora", f"the adapter {name!r} ({path}) cannot be loaded: {reason}")])


class ResponseNotFound(LlmflowError):
    """A kept response asked for (`previous_response_id`, a path's `response_id`) that the server
    does not have: never kept (`store: false`), deleted, or dropped from its bounded store."""

    code = "response_not_found"

    def __init__(self, response_id: str, param: str):
        self.response_id = response_id
        self.param = param
        super().__init__(
            f"{param}: no response {response_id!r} is kept here (never stored, deleted, or dropped "
            "from the server's bounded response store)"
        )


class HubNotFound(ModelNotFound):
    """A model named on the Hugging Face Hub (`hf://...`) whose repo, revision or file is not
    there; `available` lists what is, when that helps (the quantizations of a repo's GGUF files)."""

    def __init__(self, reference: str, message: str, available: list[str] | None = None):
        self.reference = reference
        self.available = available or []
        listed = f" (available: {', '.join(self.available)})" if self.available else ""
        super().__init__(f"{reference}: {message}{listed}")


class HubAccessDenied(LlmflowError):
    """A gated or private Hub repo refused the download: no token, or one without access."""

    code = "hub_access_denied"

    def __init__(self, reference: str, repo_id: str, token_given: bool):
        self.reference = reference
        self.token_given = token_given
        why = (
            "the token in HF_TOKEN has no access to it: accept its terms on the Hub with that account"
            if token_given
            else "it is gated or private: set HF_TOKEN to a token of an account that has access"
        )
        super().__init__(f"{reference}: the Hub refused to download {repo_id}: {why}")


class HubUnavailable(LlmflowError):
    """A Hub model that is not in the local cache while the Hub cannot be asked: offline mode
    (`HF_HUB_OFFLINE=1`), or the Hub unreachable."""

    code = "hub_unavailable"

    def __init__(self, reference: str, reason: str):
        self.reference = reference
        self.reason = reason
        super().__init__(f"{reference} is not in the local Hugging Face cache and {reason}")


class DownloadFailed(LlmflowError):
    """A Hub file that did not arrive whole and right: cut short, or its checksum differs from
    the Hub's (the file is then removed from the cache, never used)."""

    code = "download_failed"

    def __init__(self, reference: str, path: str, reason: str):
        self.reference = reference
        self.path = path
        self.reason = reason
        super().__init__(f"{reference}: downloading {path} failed: {reason}")


class DiskFull(LlmflowError):
    """Not enough free disk space for a download: `needed` bytes where `free` are left (None when
    the disk filled up during the download)."""

    code = "disk_full"

    def __init__(self, reference: str, directory: str, needed: int | None = None, free: int | None = None):
        self.reference = reference
        self.directory = directory
        self.needed = needed
        self.free = free
        if needed is None or free is None:
            why = "the disk filled up during the download"
        else:
            why = f"the download needs {needed / 1e9:.2f} GB, {free / 1e9:.2f} GB are free"
        super().__init__(f"{reference}: not enough disk space in {directory!r}: {why}")


class ModelTooLarge(LlmflowError):
    """A served model whose estimated memory alone is over the server's memory budget: it is
    never loaded, so a request for it is refused at once (waiting would not help)."""

    code = "model_too_large"
    param = "model"


class UnknownEngine(LlmflowError):
    code = "unknown_engine"

    def __init__(self, name: str, known: list[str]):
        self.name = name
        self.known = known
        super().__init__(f"unknown engine {name!r}; known engines: {', '.join(known)}")


class EngineUnavailable(LlmflowError):
    """An engine whose optional dependency is not installed or whose hardware is missing."""

    code = "engine_unavailable"


class EngineFailed(LlmflowError):
    """The engine broke while generating (not the caller's fault): a background thread died, a
    device error. The stream that sees it ends with this error."""

    code = "engine_error"

    def __init__(self, message: str):
        super().__init__(message)


class ReplicaLost(LlmflowError):
    """The Ray Serve replica serving a request stopped (it died or was removed) before the
    answer was complete. Ray Serve starts a new one; the request may be sent again."""

    code = "replica_lost"

    def __init__(self, detail: str):
        super().__init__(f"the model replica serving this request stopped: {detail}")


class BatchFileError(LlmflowError):
    """A batch input or output llmflow cannot use: an unknown format, no prompt column, an
    output that exists already."""

    code = "batch_file_error"


class SparkUnavailable(LlmflowError):
    """Spark was asked for but cannot start here: pyspark (the `spark` extra) or Java is missing."""

    code = "spark_unavailable"


class QueueFull(LlmflowError):
    code = "queue_full"

    def __init__(self, limit: int, retry_after_s: int = 1):
        self.limit = limit
        self.retry_after_s = retry_after_s
        super().__init__(f"the server is busy: {limit} requests are already waiting; retry later")


class Unauthorized(LlmflowError):
    """A missing or wrong API key."""

    code = "invalid_api_key"

    def __init__(
        self,
        message: str = "a valid API key is needed: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'",
    ):
        super().__init__(message)


class RequestTooLarge(LlmflowError):
    code = "request_too_large"

    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        super().__init__(f"the request body is larger than the server's limit of {limit_bytes} bytes")


class RequestReadTimeout(LlmflowError):
    """A client that did not send its request head, or then its body, within the server's read
    timeout (a slow or stalled client): the server answers and closes the connection."""

    code = "request_read_timeout"

    def __init__(self, timeout_s: float, part: str = "body"):
        self.timeout_s = timeout_s
        super().__init__(
            f"the request {part} did not arrive within the server's read timeout of {timeout_s:g} s"
        )


class TooManyConnections(LlmflowError):
    """A connection beyond the server's limit of open connections: answered and closed at once."""

    code = "too_many_connections"

    def __init__(self, limit: int, retry_after_s: int = 1):
        self.limit = limit
        self.retry_after_s = retry_after_s
        super().__init__(f"the server has {limit} open connections, its limit; retry later")


class UnsupportedEndpoint(LlmflowError):
    """A route the served model cannot answer, e.g. chat completions for a plain pyfunc model."""

    code = "unsupported_endpoint"


class RequestTimeout(LlmflowError):
    """A request that ran past the server's per-request time limit."""

    code = "timeout"

    def __init__(self, timeout_s: float, message: str | None = None):
        self.timeout_s = timeout_s
        super().__init__(message or f"the request took longer than the server's limit of {timeout_s:g} s")


class QueueTimeout(RequestTimeout):
    """A request that waited in the queue for its whole time limit: the server is overloaded."""

    code = "queue_timeout"

    def __init__(self, timeout_s: float, retry_after_s: int = 1):
        self.retry_after_s = retry_after_s
        super().__init__(
            timeout_s, f"the server is busy: the request waited {timeout_s:g} s in the queue; retry later"
        )


class ClientDisconnected(LlmflowError):
    """The client went away before its request got a place: nothing is generated for it."""

    code = "client_disconnected"

    def __init__(self) -> None:
        super().__init__("the client disconnected while the request waited for a place")
