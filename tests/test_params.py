import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from llmflow.errors import InvalidParams
from llmflow.params import MAX_STOP_STRINGS, SamplingParams


def test_defaults():
    p = SamplingParams()
    assert p.temperature == 0.8 and p.max_tokens == 256 and p.stop == () and p.seed is None


def test_stop_accepts_a_string_or_a_list():
    assert SamplingParams.parse({"stop": "<|im_end|>"}).stop == ("<|im_end|>",)
    assert SamplingParams.parse({"stop": ["a", "bc", "a"]}).stop == ("a", "bc")
    assert SamplingParams.parse({"stop": None}).stop == ()


def test_every_bad_field_is_named_at_once():
    with pytest.raises(InvalidParams) as info:
        SamplingParams.parse({"temperature": "hot", "top_p": 0, "max_tokens": 0, "seed": -1, "nope": 1})
    assert {p.field for p in info.value.problems} == {"temperature", "top_p", "max_tokens", "seed", "nope"}
    assert "temperature" in str(info.value) and "nope" in str(info.value)


def test_stop_limits():
    with pytest.raises(InvalidParams, match="stop"):
        SamplingParams.parse({"stop": [""]})
    with pytest.raises(InvalidParams, match="stop"):
        SamplingParams.parse({"stop": [str(i) for i in range(MAX_STOP_STRINGS + 1)]})


def test_merged_keeps_defaults_and_validates():
    base = SamplingParams.parse({"temperature": 0.2, "max_tokens": 10})
    assert base.merged({"max_tokens": 5}).temperature == 0.2
    with pytest.raises(InvalidParams):
        base.merged({"max_tokens": -5})


def test_frozen():
    with pytest.raises(ValidationError):
        SamplingParams().temperature = 1.0  # type: ignore[misc]


@given(
    st.dictionaries(
        st.sampled_from(["temperature", "top_k", "top_p", "max_tokens", "stop", "seed"]),
        st.one_of(st.none(), st.integers(-5, 5), st.floats(-2, 2), st.text(max_size=3)),
    )
)
def test_property_parse_either_validates_or_names_fields(values):
    try:
        SamplingParams.parse(values)
    except InvalidParams as exc:
        assert exc.problems and all(p.field.split(".")[0] in values for p in exc.problems)
