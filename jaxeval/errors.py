"""The one exception type users see, and helpers that make its message say what to do."""

from __future__ import annotations


class JaxevalError(Exception):
    """A problem with the user's input: names the task, file, field and document, and says what to do.

    The CLI prints the message (no traceback) and exits non-zero; no results file is written.
    """

    def __init__(
        self,
        message: str,
        *,
        task: str | None = None,
        file: str | None = None,
        field: str | None = None,
        doc: int | None = None,
        hint: str | None = None,
    ):
        where = []
        if task is not None:
            where.append(f"task '{task}'")
        if file is not None:
            where.append(f"file {file}")
        if field is not None:
            where.append(f"field '{field}'")
        if doc is not None:
            where.append(f"document {doc}")
        text = message
        if where:
            text = f"{', '.join(where)}: {message}"
        if hint:
            text = f"{text}\n  What to do: {hint}"
        super().__init__(text)
        self.message = message
        self.task, self.file, self.field, self.doc, self.hint = task, file, field, doc, hint

    def located(self, **where: object) -> JaxevalError:
        """The same error with missing location parts (task, file, field, doc) filled in."""
        parts = {k: getattr(self, k) for k in ("task", "file", "field", "doc")}
        for key, value in where.items():
            if parts.get(key) is None:
                parts[key] = value
        return JaxevalError(self.message, hint=self.hint, **parts)  # type: ignore[arg-type]
