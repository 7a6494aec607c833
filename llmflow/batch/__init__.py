"""Batch inference over a file of prompts: in this process, or on Spark (`llmflow batch`).

Both paths answer through the logged model's `predict` with `result="struct"`, so they write the
same columns: the input's columns, then answer, finish_reason, prompt_tokens, completion_tokens
and error (see `llmflow.mlflow.struct_result`).
"""
