"""Models named on the Hugging Face Hub (`hf://ORG/REPO[:QUANT | /path/file.gguf][@revision]`):
the grammar (`ref`), which files a reference needs (`select`), downloading them into
huggingface_hub's cache with progress and checksums (`fetch`), and what that cache holds
(`cache`)."""

from llmflow.hub.fetch import HubModel, fetch
from llmflow.hub.ref import HubRef

__all__ = ["HubModel", "HubRef", "fetch"]
