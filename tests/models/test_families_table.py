"""The README's supported-families table is the registry's (`python -m jaxeval.models`)."""

from __future__ import annotations

import pathlib

from jaxeval.models.families import FAMILIES, families_markdown
from jaxeval.models.weights.gguf import GGUF_ARCHITECTURES

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_table_is_generated_from_the_registry():
    text = README.read_text()
    start, end = "<!-- families:start -->\n", "<!-- families:end -->"
    table = text[text.index(start) + len(start) : text.index(end)]
    expected = families_markdown(frozenset(GGUF_ARCHITECTURES.values()))
    assert table == expected, "README's table is stale: python -m jaxeval.models > table, paste it"
    assert all(f"| `{t}` |" in table for t in FAMILIES)
