"""Load-time options of the transformers engine, and how "auto" resolves on the machine at hand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from llmflow.engines.base import EngineOptions
from llmflow.errors import EngineUnavailable, InvalidParams

DTYPES = ("float32", "bfloat16", "float16")


class TransformersOptions(EngineOptions):
    """What a user may set. "auto" means: CUDA when there is a GPU, else the CPU; bfloat16 on CUDA,
    float32 on the CPU (bf16 matmuls are slow or emulated on most CPUs); on CUDA the static-cache
    path compiled and replayed as a CUDA graph."""

    device: str = Field("auto", description='"auto", "cpu", "cuda" or "cuda:N"')
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    n_ctx: int | None = Field(
        None,
        ge=16,
        description="context window in tokens; default: the model's own (4096 at most with a static cache)",
    )
    static_cache: bool | None = Field(
        None, description="preallocated KV cache reused by every request (auto: on CUDA)"
    )
    torch_compile: bool | None = Field(
        None, description="compile the decode step (auto: with a static cache on CUDA)"
    )
    cuda_graphs: bool | None = Field(
        None,
        description="replay the compiled decode step as one CUDA graph (auto: with torch_compile on CUDA)",
    )
    warmup: bool = Field(True, description="compile and capture at load, not on the first request")
    continuous_batching: bool = Field(
        False,
        description="serve concurrent streams through transformers' continuous batching (per-request "
        "temperature/top_k/top_p only; see the engine's docs)",
    )
    batch_sampling: bool = Field(
        True,
        description="continuous batching: per-request temperature/top_k/top_p; false decodes every "
        "request greedily, which saves two sorts over the vocabulary per step",
    )
    max_concurrency: int = Field(
        64, ge=1, le=4096, description="streams decoded together with continuous batching"
    )
    max_memory_percent: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="size the continuous-batching KV cache from this share of free memory "
        "(default: room for max_concurrency sequences of n_ctx tokens)",
    )
    batch_page_size: int = Field(
        32,
        ge=8,
        description="tokens per continuous-batching cache block (smaller: less padding to attend over)",
    )
    max_batch_tokens: int | None = Field(
        None, ge=16, description="tokens per continuous-batching step (default: 8192 on CUDA, 512 on the CPU)"
    )
    attn_implementation: str | None = Field(
        None, description='e.g. "sdpa", "eager"; default: transformers\' choice'
    )
    ignore_eos: bool = Field(
        False, description="never sample EOS: every answer runs to max_tokens (benchmarks)"
    )
    image_cache_mib: int = Field(
        256,
        ge=0,
        description="a vision model's encoded images kept by hash, in MiB: a resent image is not "
        "encoded again",
    )
    trust_remote_code: bool = False
    lora: dict[str, str] = Field(
        default_factory=dict,
        description="LoRA adapters to load, name -> PEFT adapter directory; a request picks one by name "
        "(llmflow's own decode loop only: not with continuous_batching or torch_compile)",
    )


@dataclass(frozen=True)
class Placement:
    """Options resolved against the machine: where the model runs and how it decodes."""

    device: Any  # torch.device
    dtype: Any  # torch.dtype
    static_cache: bool
    torch_compile: bool
    cuda_graphs: bool

    @property
    def on_cuda(self) -> bool:
        return self.device.type == "cuda"


def resolve(options: TransformersOptions) -> Placement:
    import torch

    device = _device(torch, options.device)
    on_cuda = device.type == "cuda"
    if options.dtype == "auto":
        dtype = torch.bfloat16 if on_cuda else torch.float32
    else:
        dtype = getattr(torch, options.dtype)
    static_cache = on_cuda if options.static_cache is None else options.static_cache
    torch_compile = (static_cache and on_cuda) if options.torch_compile is None else options.torch_compile
    if torch_compile and not static_cache:
        raise InvalidParams.single(
            "torch_compile", "needs static_cache: a growing cache recompiles every step"
        )
    cuda_graphs = (torch_compile and on_cuda) if options.cuda_graphs is None else options.cuda_graphs
    if cuda_graphs and not (on_cuda and static_cache):
        raise InvalidParams.single("cuda_graphs", "needs a CUDA device and static_cache")
    return Placement(device, dtype, static_cache, torch_compile, cuda_graphs)


def _device(torch: Any, name: str) -> Any:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise InvalidParams.single("device", f"not a torch device: {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise EngineUnavailable(f"device {name!r} was asked for but torch sees no CUDA device")
    return device
