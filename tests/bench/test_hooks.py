"""The documented hooks the benchmarks use instead of llmflow's private names: the llama-cpp-python
object under a `llama_cpp` engine, and a constraint compiler given a tokenizer built already."""

from llmflow import LLM
from llmflow.constraints import Constraint
from llmflow.constraints.compiler import ConstraintCompiler, lltokenizer


def test_a_llama_cpp_engine_hands_out_its_llama_object():
    from llama_cpp import Llama

    llm = LLM.load()
    try:
        llama = llm.engine.llama
        assert isinstance(llama, Llama)
        assert llama.n_ctx() == llm.engine.n_ctx
    finally:
        llm.close()


def test_compilers_of_one_vocabulary_share_a_tokenizer_built_once():
    llm = LLM.load()
    try:
        vocabulary = llm.engine.token_vocabulary()
        tokenizer = lltokenizer(vocabulary)
        first, second = (ConstraintCompiler(vocabulary, tokenizer=tokenizer) for _ in range(2))
        schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
        for compiler in (first, second):
            matcher = compiler.compile(Constraint.json_schema(schema)).start()
            assert matcher is not None
        assert first.compile(Constraint.json_schema(schema)) is first.compile(Constraint.json_schema(schema))
    finally:
        llm.close()
