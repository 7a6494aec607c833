"""How a model writes function calls, one class per format: Hermes / Qwen (`<tool_call>` JSON),
Llama 3.x (a JSON object with `parameters`), Mistral (`[TOOL_CALLS]` and a JSON list), and
llmflow's generic JSON format for chat templates that know nothing of tools (the embedded
SmolLM2's). A format knows how a call looks, the constraints that force well-formed calls whose
arguments validate (the whole answer for `required`; for `auto`, from the moment the model opens a
call), and how to find the calls in the text (`CallScanner`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

from llmflow.constraints import Constraint
from llmflow.constraints.compiler import embedded_json
from llmflow.prompts import ChatTemplate, PromptFormat
from llmflow.tools.scanner import CallScanner
from llmflow.tools.spec import Tool
from llmflow.types import Message, ToolCall

#: a model's control token spelled like a marker: its id, or None (`LLM.control_token`)
ControlTokens = Callable[[str], int | None]


def no_control_tokens(_marker: str) -> int | None:
    return None


class ToolCallFormat:
    """The generic format: the whole answer is `{"tool_calls": [{"name": ..., "arguments": {...}}]}`.
    Templates that render tools have their own subclasses."""

    name: ClassVar[str] = "generic"
    #: the key of a call's arguments
    arguments_key: ClassVar[str] = "arguments"
    #: how many JSON containers enclose a call object, itself included
    call_depth: ClassVar[int] = 3
    #: the text that starts the calls (or a marker does); an answer that starts otherwise is text
    opener: ClassVar[str] = "{"
    #: markers a model may write before its calls (control tokens in the model's own vocabulary,
    #: text where the vocabulary lacks them): optional in the `auto` grammar
    markers: ClassVar[tuple[str, ...]] = ()
    #: calls may follow text (Hermes); otherwise an answer is either text or calls
    calls_after_text: ClassVar[bool] = False
    #: the template renders the tools itself
    template_renders_tools: ClassVar[bool] = False

    def scanner(self) -> CallScanner:
        return CallScanner(self.call_depth)

    def call_rules(self, tools: Sequence[Tool]) -> str:
        """Lark rules for `call`: one call to any of `tools`, name first, its arguments
        validating against the tool's parameters."""
        names = [f"call_{i}" for i in range(len(tools))]
        rules = [f"call: {' | '.join(names)}"]
        for name, tool in zip(names, tools, strict=True):
            head = json.dumps(f'{{"name": {json.dumps(tool.name)}, "{self.arguments_key}": ')
            rules.append(f'{name}: {head} %json {embedded_json(dict(tool.parameters))} "}}"')
        return "\n".join(rules) + "\n"

    def calls_rule(self, parallel: bool) -> str:
        """The Lark rule `calls`: the answer when it calls functions."""
        more = '(", " call)*' if parallel else ""
        return f'calls: "{{\\"tool_calls\\": [" call {more} "]}}"\n'

    def calls_constraint(self, tools: Sequence[Tool], parallel: bool, field: str) -> Constraint:
        """The whole answer is calls (tool_choice `required` or a named function)."""
        grammar = "start: calls\n" + self.calls_rule(parallel) + self.call_rules(tools)
        return Constraint.grammar(grammar, field)

    def auto_constraint(
        self,
        tools: Sequence[Tool],
        parallel: bool,
        field: str,
        control_token: ControlTokens = no_control_tokens,
    ) -> Constraint:
        """`auto`: text, or, once the answer opens like a call (an opener, or a marker), calls that
        validate. The text may not start with whitespace, so a model cannot pad its way past the
        trigger. A marker that is a control token of the model (`control_token`: its id, if any)
        may come as that token or as text; text itself can never hold a control token."""
        text = f"/[^{_regex_literal(self.opener[0])}\\s](?s:.*)/"
        text += "".join(f" & ~/{_regex_literal(m)}(?s:.*)/" for m in self.markers)
        spellings = [_spelling(m, control_token(m)) for m in self.markers]
        lead = f"({' | '.join(spellings)})? " if spellings else ""
        grammar = f"start: TEXT | {lead}calls\nTEXT: {text}\n" + self.calls_rule(parallel)
        return Constraint.grammar(grammar + self.call_rules(tools), field)

    def system_prompt(self, tools: Sequence[Tool], parallel: bool) -> str | None:
        """Instructions for a template that does not render tools."""
        listing = json.dumps([t.to_openai()["function"] for t in tools], ensure_ascii=False)
        many = "one or more calls" if parallel else "exactly one call"
        return (
            f"You can call these functions: {listing}\n"
            "To call functions, answer with only a JSON object and nothing else, with "
            f'{many}: {{"tool_calls": [{{"name": "<function name>", "arguments": {{...}}}}]}}. '
            "Otherwise answer in plain text."
        )

    def render_calls(self, calls: Sequence[ToolCall]) -> str:
        """A past assistant message's calls as this format writes them."""
        items = [f'{{"name": {json.dumps(c.name)}, "arguments": {c.arguments}}}' for c in calls]
        return '{"tool_calls": [' + ", ".join(items) + "]}"

    def rewrite(self, messages: Sequence[Message]) -> list[Message]:
        """The conversation for a template without tool support: calls as text, tool results
        as user messages."""
        out = []
        for m in messages:
            if m.tool_calls:
                text = self.render_calls(m.tool_calls)
                out.append(Message("assistant", f"{m.content}\n{text}" if m.content else text))
            elif m.role == "tool":
                out.append(Message("user", f"Result of call {m.tool_call_id}: {m.content}"))
            else:
                out.append(m)
        return out


class HermesFormat(ToolCallFormat):
    """Hermes / Qwen 2.5+: `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`, after
    optional text."""

    name: ClassVar[str] = "hermes"
    call_depth: ClassVar[int] = 1
    opener: ClassVar[str] = "<tool_call>"
    calls_after_text: ClassVar[bool] = True
    template_renders_tools: ClassVar[bool] = True

    def calls_rule(self, parallel: bool) -> str:
        block = '"<tool_call>\\n" call "\\n</tool_call>"'
        return f'calls: {block} ("\\n" {block})*\n' if parallel else f"calls: {block}\n"

    def auto_constraint(
        self,
        tools: Sequence[Tool],
        parallel: bool,
        field: str,
        control_token: ControlTokens = no_control_tokens,
    ) -> Constraint:
        """Any text; once `<tool_call>` appears (a lazy lexeme: the text before it ends at its
        first occurrence), the rest is calls that validate and then the end of the answer."""
        rest = '("\\n" "<tool_call>\\n" call "\\n</tool_call>")*' if parallel else ""
        grammar = (
            "start: TEXT | lead first\n"
            "TEXT: /(?s:.*)/\n"
            'lead[lazy]: TEXT "<tool_call>"\n'
            f'first: "\\n" call "\\n</tool_call>" {rest}\n'
        )
        return Constraint.grammar(grammar + self.call_rules(tools), field)

    def system_prompt(self, tools: Sequence[Tool], parallel: bool) -> str | None:
        return None


class Llama3Format(ToolCallFormat):
    """Llama 3.1 / 3.2 / 3.3: the answer is `{"name": ..., "parameters": {...}}` (after the
    `<|python_tag|>` control token, which renders as nothing, or that marker as text)."""

    name: ClassVar[str] = "llama3"
    arguments_key: ClassVar[str] = "parameters"
    call_depth: ClassVar[int] = 1
    markers: ClassVar[tuple[str, ...]] = ("<|python_tag|>",)
    template_renders_tools: ClassVar[bool] = True

    def calls_rule(self, parallel: bool) -> str:
        return 'calls: call ("; " call)*\n' if parallel else "calls: call\n"

    def system_prompt(self, tools: Sequence[Tool], parallel: bool) -> str | None:
        return None


class MistralFormat(ToolCallFormat):
    """Mistral: `[TOOL_CALLS]` then a JSON list of calls (the marker is a control token in
    recent vocabularies and then renders as nothing; the list is what is parsed)."""

    name: ClassVar[str] = "mistral"
    call_depth: ClassVar[int] = 2
    opener: ClassVar[str] = "["
    markers: ClassVar[tuple[str, ...]] = ("[TOOL_CALLS]",)
    template_renders_tools: ClassVar[bool] = True

    def calls_rule(self, parallel: bool) -> str:
        return 'calls: "[" call (", " call)* "]"\n' if parallel else 'calls: "[" call "]"\n'

    def system_prompt(self, tools: Sequence[Tool], parallel: bool) -> str | None:
        return None


FORMATS: Mapping[str, type[ToolCallFormat]] = {
    f.name: f for f in (ToolCallFormat, HermesFormat, Llama3Format, MistralFormat)
}


def _spelling(marker: str, token: int | None) -> str:
    """A marker in a Lark grammar: as text, or also as the model's control token `token`."""
    return json.dumps(marker) if token is None else f"(<[{token}]> | {json.dumps(marker)})"


def _regex_literal(text: str) -> str:
    """`text` inside a grammar's /regex/ (Rust regex syntax: only its metacharacters escaped)."""
    return "".join(f"\\{c}" if c in "\\.+*?()|[]{}^$" else c for c in text)


def format_for(prompt_format: PromptFormat) -> ToolCallFormat:
    """The format the model's own chat template asks for; the generic one when it renders no tools."""
    if not isinstance(prompt_format, ChatTemplate) or not prompt_format.renders_tools:
        return ToolCallFormat()
    source = prompt_format.source
    if "<tool_call>" in source:
        return HermesFormat()
    if "[TOOL_CALLS]" in source:
        return MistralFormat()
    if "<|start_header_id|>" in source or "<|python_tag|>" in source:
        return Llama3Format()
    return HermesFormat()  # the most common convention of templates that take `tools`
