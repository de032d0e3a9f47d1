"""Prompt assembly as lm-eval does it: messages with delimiters, plain text or chat template.

Without a chat template the prompt is the concatenation of `content + delimiter` over messages:

    system("Be helpful.")                        -> "Be helpful."       (no delimiter after it)
    user("Q1", " ") + assistant("A1", "\\n\\n")    -> "Q1 A1\\n\\n"
    user("Q2", "")                                -> "Q2"
    = "Be helpful.Q1 A1\\n\\nQ2"

With a chat template, `fewshot_as_multiturn` keeps the turns; otherwise everything but the system
message (and a trailing assistant prefix) collapses into one user message whose text equals the
plain-text rendering.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def maybe_delimit(prefix: str | None, suffix: str | None, delimiter: str = " ") -> str:
    """Joins two strings, inserting `delimiter` only if neither has whitespace at the boundary."""
    if not prefix:
        return suffix or ""
    if not suffix:
        return prefix or ""
    if prefix[-1].isspace() or suffix[0].isspace():
        return prefix + suffix
    return prefix + delimiter + suffix


def requires_delimiter(prefix: str, suffix: str) -> bool:
    if prefix == "":
        return False
    return not (prefix[-1].isspace() or suffix[0].isspace())


def ends_with_whitespace(s: str) -> bool:
    return bool(s) and s[-1].isspace()


@dataclasses.dataclass
class Message:
    role: str
    content: str
    delimiter: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}

    def to_text(self) -> str:
        return self.content + self.delimiter


def messages_to_text(messages: list[Message]) -> str:
    return "".join(m.to_text() for m in messages)


def multiturn_to_singleturn(messages: list[Message]) -> list[dict[str, Any]]:
    """Collapses turns into one user message (plus the system message and a trailing assistant)."""
    system, rest = (messages[0], messages[1:]) if messages[0].role == "system" else (None, messages)
    rest = [dataclasses.replace(m) for m in rest]
    if rest[-1].role == "assistant":
        users = rest[:-1]
        users[-1].delimiter = ""
        out = [Message("user", messages_to_text(users)).to_dict(), rest[-1].to_dict()]
    else:
        rest[-1].delimiter = ""
        out = [Message("user", messages_to_text(rest)).to_dict()]
    return [system.to_dict(), *out] if system else out


def qa_turn(
    q: str,
    *,
    choices: list[str] | None = None,
    answer: Any = None,
    gen_prefix: str | None = None,
    target_delimiter: str = " ",
    fewshot_delimiter: str = "\n\n",
) -> list[Message]:
    """One question (user) and, when given, its answer (assistant): lm-eval's `build_qa_turn`."""
    has_answer = answer is not None and answer != ""
    if has_answer and not gen_prefix:
        user_delim = target_delimiter
    elif gen_prefix and requires_delimiter(q, gen_prefix):
        user_delim = target_delimiter
    else:
        user_delim = ""
    msgs = [Message("user", q, user_delim)]
    if has_answer:
        if choices and isinstance(answer, int):
            text = choices[answer]
        elif isinstance(answer, list):
            text = answer[0]
        else:
            text = answer
        msgs.append(Message("assistant", maybe_delimit(gen_prefix, text, " "), fewshot_delimiter))
    elif gen_prefix:
        msgs.append(Message("assistant", gen_prefix))
    return msgs


def render_messages(
    messages: list[Message], *, chat_template: Any = None, fewshot_as_multiturn: bool = False
) -> str:
    """Plain text, or the model's chat template applied to the turns."""
    if chat_template is None:
        return messages_to_text(messages)
    turns = (
        [m.to_dict() for m in messages]
        if fewshot_as_multiturn
        else multiturn_to_singleturn(messages)
    )
    return chat_template(turns)
