"""The transformers engine (registered as "transformers"): Hugging Face model directories.

Needs the `transformers` extra (torch, transformers). Importing this package imports neither:
they load with the first model.
"""

from llmflow.engines.hf.engine import TransformersEngine
from llmflow.engines.hf.options import TransformersOptions

__all__ = ["TransformersEngine", "TransformersOptions"]
