"""Jinja2 prompt templates, rendered exactly as lm-eval renders them, but sandboxed.

Same environment options as lm-eval (`StrictUndefined`, `keep_trailing_newline=True`, no autoescape,
a `regex_replace` filter); a `SandboxedEnvironment` so a task file cannot reach Python internals.

    render("Question: {{question}}\\nAnswer:", {"question": "2+2?"}) -> "Question: 2+2?\\nAnswer:"
    render("{{missing}}", {"question": "x"})  -> JaxevalError naming the missing variable
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from jaxeval.errors import JaxevalError


def regex_replace(string: str, pattern: str, repl: str, count: int = 0) -> str:
    return re.sub(pattern, repl, string, count=count)


@functools.lru_cache(maxsize=1)
def _environment() -> SandboxedEnvironment:
    env = SandboxedEnvironment(
        loader=jinja2.BaseLoader(), undefined=jinja2.StrictUndefined, keep_trailing_newline=True
    )
    env.filters["regex_replace"] = regex_replace
    return env


@functools.lru_cache(maxsize=4096)
def _compile(template: str) -> jinja2.Template:
    return _environment().from_string(template)


def render(
    template: str,
    doc: dict[str, Any],
    *,
    task: str | None = None,
    field: str | None = None,
    doc_index: int | None = None,
) -> str:
    """Renders `template` with the document's keys as variables; errors name task, field and doc."""
    try:
        return _compile(template).render(**doc)
    except jinja2.UndefinedError as e:
        raise JaxevalError(
            f"template {template!r} uses an undefined variable ({e.message}); "
            f"the document has keys {sorted(doc)}",
            task=task,
            field=field,
            doc=doc_index,
            hint="fix the template or point it at a field the dataset has",
        ) from None
    except jinja2.TemplateError as e:
        raise JaxevalError(
            f"template {template!r} cannot be rendered: {e}", task=task, field=field, doc=doc_index
        ) from None
    except Exception as e:  # the template's own arithmetic/filters on this document's values
        raise JaxevalError(
            f"template {template!r} failed on this document: {type(e).__name__}: {e}",
            task=task,
            field=field,
            doc=doc_index,
            hint="make the template handle this document's values (or fix the document)",
        ) from None
