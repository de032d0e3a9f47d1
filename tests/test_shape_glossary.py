"""Every dimension name in a shape annotation or shape comment is in `jaxeval.shapes.GLOSSARY`.

What counts, in every .py file under `jaxeval/`:

* **Annotations**: `Int["..."]`, `Float["..."]`, `Bool["..."]` (found with `ast`, so strings and
  comments that merely mention them do not count). The string is whitespace-separated dimensions;
  `""` is a scalar.
* **Shape comments**: inside a `#` comment (found with `tokenize`, so docstrings do not count), a
  bracket group `[...]` that
  1. is not a subscript: the `[` follows the start of the comment, a space, `(` or `,`, or a dtype
     (`bool`, `int32`, `uint8`, `float32`, `bfloat16`, ...: `int32[B, N]`), and
  2. holds only letters, digits, `_`, `.`, `*`, `/`, `+`, `-`, `'`, `(`, `)`, spaces and commas
     (so `[#gold, #pred]` or `["a", "b"]` are prose or data, not shapes).
  Its content is comma-separated dimensions; `[]` is a scalar.

A dimension is a glossary name, a non-negative integer or `...`, or such terms joined by `*`, `/`,
`+`, `-` (`B*K`, `T/Q`, `E'/2`; spaces around an operator are allowed in comments). A primed name
(`E'`) is a name of its own and must be in the glossary. Anything else fails: an unknown name
(`chunk`, `Tq`), a word (`[K true, K pred]`) or an annotation (`[W(end), M]`): say it in the prose
around the brackets instead.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from jaxeval.shapes import GLOSSARY

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("jaxeval",)
SHAPE_TYPES = {"Int", "Float", "Bool"}

_DTYPE = r"(?:bool|u?int(?:8|16|32|64)|b?float(?:16|32|64)|complex(?:64|128))"
_BRACKETS = re.compile(r"\[([^\[\]]*)\]")
_SHAPE_POSITION = re.compile(rf"(?:^|[\s(,]|(?<![\w.]){_DTYPE})$")  # what may precede the `[`
_SHAPE_CHARS = re.compile(r"[\w.*/+\-'() ,]*")
_NAME = r"[A-Za-z_][A-Za-z0-9_]*'?"
_TERM = rf"(?:{_NAME}|\d+|\.\.\.)"


def _dimension(spaced: bool) -> re.Pattern[str]:
    gap = r"\s*" if spaced else ""
    return re.compile(rf"{_TERM}(?:{gap}[*/+\-]{gap}{_TERM})*")


_DIM_ANNOTATION = _dimension(spaced=False)
_DIM_COMMENT = _dimension(spaced=True)


def _check_dims(dims: list[str], pattern: re.Pattern[str], where: str) -> list[str]:
    problems = []
    for dim in dims:
        if not pattern.fullmatch(dim):
            problems.append(f"{where}: {dim!r} is not a dimension (glossary names, integers, ...)")
            continue
        for name in re.findall(_NAME, dim):
            if name not in GLOSSARY:
                problems.append(f"{where}: unknown dimension name {name!r} in {dim!r}")
    return problems


def _annotation_string(node: ast.Subscript) -> str | None:
    """The shape string of `Int["B T"]` (or jaxtyping's `Int[Array, "B T"]`), else None."""
    if not (isinstance(node.value, ast.Name) and node.value.id in SHAPE_TYPES):
        return None
    index = node.slice
    if isinstance(index, ast.Tuple) and index.elts:
        index = index.elts[-1]
    if isinstance(index, ast.Constant) and isinstance(index.value, str):
        return index.value
    return None


def shape_problems(source: str, filename: str) -> list[str]:
    """`file:line: ...` for every annotation or shape comment that uses a name not in GLOSSARY."""
    problems = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Subscript):
            dims = _annotation_string(node)
            if dims is not None:
                where = f"{filename}:{node.lineno}"
                problems += _check_dims(dims.split(), _DIM_ANNOTATION, where)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        text = tok.string.lstrip("#").strip()
        for match in _BRACKETS.finditer(text):
            before, content = text[: match.start()], match.group(1).strip()
            if not (_SHAPE_POSITION.search(before) and _SHAPE_CHARS.fullmatch(content)):
                continue
            dims = [d.strip() for d in content.split(",")] if content else []
            problems += _check_dims(dims, _DIM_COMMENT, f"{filename}:{tok.start[0]}")
    return problems


def _sources() -> list[Path]:
    return sorted(p for top in SCANNED for p in (ROOT / top).rglob("*.py"))


def test_every_shape_name_is_in_the_glossary():
    files = _sources()
    assert len(files) > 20, "the scan found too few files"
    problems = []
    for path in files:
        problems += shape_problems(path.read_text(), str(path.relative_to(ROOT)))
    assert not problems, "shapes outside the jaxeval.shapes.GLOSSARY:\n" + "\n".join(problems)


GOOD = """
from jaxeval.shapes import Bool, Float, Int

def f(x: Int["B T"], y: Float["... D"], s: Int[""], r: Float["E'/2"]) -> Bool["B*K 2"]:
    h = x  # [B, T, D]
    c = y  # int32[B, N]: a dtype before the bracket
    z = s  # [B*K, Vc], [T/Q, A], [B, T / Q], int32[]
    w = r  # type: ignore[arg-type]  -- a subscript, not a shape
    q = x  # inst.resps[name] and memo[path] are subscripts; [#gold, #pred] is prose
    return x  # [0, S) is an interval, not a bracket group
"""


def test_a_clean_snippet_passes():
    assert shape_problems(GOOD, "good.py") == []


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ('def f(x: Int["B S2"]): ...\n', "bad.py:1: unknown dimension name 'S2'"),
        ('def f(x: Float["Tq Tk"]): ...\n', "bad.py:1: unknown dimension name 'Tq'"),
        ('x: Bool["B F\'"]\n', 'bad.py:1: unknown dimension name "F\'"'),
        ("x = 1\ny = 2  # [P, chunk]\n", "bad.py:2: unknown dimension name 'chunk'"),
        ("y = 2  # float32[Kq]\n", "bad.py:1: unknown dimension name 'Kq'"),
        ("y = 2  # q [B, T, Hq, E]\n", "bad.py:1: unknown dimension name 'Hq'"),
        ("y = 2  # [K true, K pred]\n", "bad.py:1: 'K true' is not a dimension"),
        ("y = 2  # [W(end), M]\n", "bad.py:1: 'W(end)' is not a dimension"),
    ],
)
def test_an_unknown_name_fails_with_file_and_line(snippet, expected):
    problems = shape_problems(snippet, "bad.py")
    assert problems and problems[0].startswith(expected), problems


def test_the_docstring_table_lists_the_glossary():
    import jaxeval.shapes as shapes

    doc = shapes.__doc__ or ""
    missing = [
        name for name in GLOSSARY if not re.search(rf"(?m)(^|\s{{2}}){re.escape(name)} +\S", doc)
    ]
    assert not missing, f"GLOSSARY names missing from the jaxeval.shapes docstring table: {missing}"
