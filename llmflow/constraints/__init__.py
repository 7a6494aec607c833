"""Structured output: constraints on what the sampled tokens may spell (a JSON Schema, any JSON
object, a regex, a choice, a grammar), compiled once per model and constraint, applied by each
engine to its logits before sampling. Below the engines; nothing here knows of HTTP or MLflow."""

from llmflow.constraints.spec import Constraint, ConstraintKind
from llmflow.constraints.vocabulary import TokenVocabulary

__all__ = ["Constraint", "ConstraintKind", "TokenVocabulary"]
