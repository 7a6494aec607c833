"""Model files are data: a logged llmflow model loads without unpickling anything, and a chat
template from a model file cannot reach Python objects (more payloads in tests/test_prompts.py)."""

from __future__ import annotations

import pickle

import cloudpickle
import mlflow.pyfunc
import pytest

import llmflow.mlflow
from llmflow.errors import ChatTemplateError
from llmflow.prompts import ChatTemplate
from llmflow.types import Message


def _refuse(*args, **kwargs):
    raise AssertionError("a model load tried to unpickle")


def test_a_saved_llmflow_model_loads_with_pickle_disabled(tmp_path, monkeypatch):
    path = tmp_path / "model"
    llmflow.mlflow.save_model(path, default_params={"max_tokens": 2})
    assert not [p for p in path.rglob("*") if p.suffix in (".pkl", ".pickle", ".cloudpickle")]
    for module in (pickle, cloudpickle):
        monkeypatch.setattr(module, "load", _refuse)
        monkeypatch.setattr(module, "loads", _refuse)
    model = mlflow.pyfunc.load_model(str(path))
    try:
        chunks = list(model.predict_stream({"prompt": "Hi"}, params={"max_tokens": 2}))
        assert chunks
    finally:
        llm = llmflow.mlflow.find_llm(model)
        if llm is not None:
            llm.close()


@pytest.mark.parametrize(
    "payload",
    [
        "{{ self.__init__.__globals__.__builtins__ }}",
        "{{ lipsum.__globals__['os'].popen('id').read() }}",
        "{{ namespace.__init__.__globals__ }}",
        "{{ joiner.__init__.__globals__ }}",
        "{{ ''.__class__.__base__.__subclasses__() }}",
        "{{ request.application.__globals__ }}",
        "{{ messages[0].__class__.__mro__ }}",
        "{{ ''|attr('\\x5f\\x5fclass\\x5f\\x5f') }}",
        "{{ ().__class__.__base__.__subclasses__()[0] }}",
        "{{ config.items() }}",
        "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
        "{{ 'a'.format.__globals__ }}",
        "{{ '{0.__class__}'.format('') }}",
        "{{ ('{0.__class__.__mro__}'|format_map) }}",
        "{{ range(10**10)|list }}",
        "{{ 'x' * 10**9 }}",
    ],
)
def test_template_escape_payloads_are_refused(payload):
    """Known SSTI payloads: each is refused (or renders harmlessly, revealing nothing)."""
    try:
        out = ChatTemplate(payload).render([Message("user", "x")])
    except ChatTemplateError:
        return
    for secret in ("<class", "subclasses", "builtins", "uid=", "function", "module"):
        assert secret not in out, out[:200]
    assert len(out) < 1_000_000
