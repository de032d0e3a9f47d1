"""`python -m jaxeval.models`: prints the supported-families table of the README."""

from jaxeval.models.families import families_markdown
from jaxeval.models.weights.gguf import GGUF_ARCHITECTURES

print(families_markdown(frozenset(GGUF_ARCHITECTURES.values())), end="")
