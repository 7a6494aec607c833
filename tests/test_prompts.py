import pytest

from llmflow.errors import ChatTemplateError, InvalidMessages
from llmflow.prompts import ChatTemplate, PromptMap, RawPrompt, parse_messages, with_system_prompt
from llmflow.types import ImageRef, Message

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_chat_template_renders_with_generation_prompt():
    text = ChatTemplate(CHATML).render([Message("user", "Hi")])
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_template_that_does_not_parse():
    with pytest.raises(ChatTemplateError, match="does not parse"):
        ChatTemplate("{% for m in messages %}").validate()


@pytest.mark.parametrize(
    "payload",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__.__init__.__globals__ }}",
        "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
        "{{ raise_exception.__globals__ }}",
        "{% set x = messages.append(1) %}",
        "{{ (messages|attr('__class__')).__base__.__subclasses__() }}",
    ],
)
def test_sandbox_refuses_escapes(payload):
    with pytest.raises(ChatTemplateError):
        ChatTemplate(payload).render([Message("user", "x")])


def test_raise_exception_in_template_rejects_the_conversation():
    template = "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok"
    with pytest.raises(InvalidMessages, match="first must be user"):
        ChatTemplate(template).render([Message("assistant", "x")])
    assert ChatTemplate(template).render([Message("user", "x")]) == "ok"


def test_prompt_map_as_in_the_seed():
    fmt = PromptMap(
        {"system": "<s>{}</s>", "user": "<u>{}</u>"},
        pre_prompt="[",
        post_prompt="<a>",
    )
    text = fmt.render([Message("system", "be kind"), Message("user", "hi {}"), Message("tool", "x")])
    assert text == "[<s>be kind</s><u>hi {}</u><a>"


def test_prompt_map_needs_a_placeholder():
    with pytest.raises(ChatTemplateError, match="prompt_map"):
        PromptMap({"user": "no placeholder"})


def test_raw_prompt_joins_contents():
    assert RawPrompt().render([Message("user", "a"), Message("user", "b")]) == "a\nb"


def test_parse_messages_accepts_text_parts():
    (message,) = parse_messages(
        [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    )
    assert message == Message("user", "ab")


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("hello", "messages"),
        ([], "messages"),
        ([1], "messages[0]"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "wizard", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], "messages[0].content[0]"),
        ([{"role": "user", "content": [{"type": "input_audio"}]}], "messages[0].content[0]"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}],
            "messages[0].content[0]",
        ),
        (
            [{"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}],
            "messages[0].content[0]",
        ),
    ],
)
def test_parse_messages_names_the_bad_field(raw, field):
    with pytest.raises(InvalidMessages) as info:
        parse_messages(raw)
    assert info.value.problems[0].field == field


def test_parse_messages_keeps_images_in_their_place():
    url = "data:image/png;base64,AAAA"
    content = [
        {"type": "text", "text": "a"},
        {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
        {"type": "image_url", "image_url": "https://example.com/b.png"},
        {"type": "text", "text": "b"},
    ]
    (message,) = parse_messages([{"role": "user", "content": content}])
    assert message.content == "ab"
    assert message.parts == (
        "a",
        ImageRef("messages[0].content[1]", url),
        ImageRef("messages[0].content[2]", "https://example.com/b.png"),
        "b",
    )
    assert [image.is_remote for image in message.images] == [False, True]


def test_a_template_sees_images_as_hugging_face_parts():
    template = ChatTemplate(
        "{% for m in messages %}{% for p in m.content %}"
        "{% if p.type == 'image' %}<image>{% else %}{{ p.text }}{% endif %}{% endfor %}{% endfor %}"
    )
    message = Message.of_parts("user", ["look ", ImageRef("f", "data:,"), " here"])
    assert template.render([message]) == "look <image> here"


def test_system_prompt_only_when_none_given():
    user = [Message("user", "x")]
    assert with_system_prompt(user, "sys")[0] == Message("system", "sys")
    with_system = [Message("system", "mine"), *user]
    assert with_system_prompt(with_system, "sys") == with_system


LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


@pytest.mark.parametrize(
    ("source", "boundary"),
    [
        (CHATML, "<|im_end|>\n<|im_start|>user\n"),
        (LLAMA3, "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"),
        # no plain boundary: each message's text twice, a conversation refused, the text dropped
        ("{% for m in messages %}{{ m.content }}|{{ m.content }}{% endfor %}", ""),
        ("{{ raise_exception('a system message first') }}", ""),
        ("{% for m in messages %}{{ m.role }}{% endfor %}", ""),
    ],
)
def test_the_turn_boundary_is_what_stands_between_an_answer_and_the_next_message(source, boundary):
    assert ChatTemplate(source, bos_token="<s>").turn_boundary == boundary


def test_the_next_turn_opening_is_tokenized_as_a_prompt_holds_it():
    """A boundary whose first character a tokenizer merges with the answer's last gives no
    tokens; one whose last character it merges with the next message loses that token only."""
    from llmflow.llm import stable_tokens

    def chars(text: str) -> list[int]:  # a token per character, but ".b" and "|T" are one each
        return [ord(c) for c in text.replace(".b", "\x01").replace("|T", "\x02")]

    assert stable_tokens("<|x|>\n", chars) == tuple(map(ord, "<|x|>\n"))
    assert stable_tokens("b>", chars) == ()
    assert stable_tokens("<|x|", chars) == tuple(map(ord, "<|x"))
