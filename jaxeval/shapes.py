"""The dimension glossary: the letters used in shape annotations and `# [B, T]` comments everywhere.

    B  rows in a batch                     T  padded row length (tokens)
    K  score points per row                D  model width (hidden size)
    V  vocabulary size                     W  rolling-window length
    R  requests                            S  request slots per batch
    H  attention heads (query)             G  key/value heads (GQA groups)
    E  head dimension                      L  layers
    N  new tokens to generate              C  KV-cache length

Kernels annotate with jaxtyping-style strings, e.g. `Int[Array, "B T"]`; this module gives the aliases
so that annotations need no extra dependency at run time.
"""

from __future__ import annotations

from typing import Annotated, Any

import jax

GLOSSARY = {
    "B": "rows in a batch",
    "T": "padded row length",
    "K": "score points per row",
    "D": "model width",
    "V": "vocabulary size",
    "W": "rolling-window length",
    "R": "requests",
    "S": "request slots per batch",
    "H": "query heads",
    "G": "key/value heads",
    "E": "head dimension",
    "L": "layers",
    "N": "new tokens",
    "C": "KV-cache length",
}


class _Shaped:
    """`Int["B T"]` -> an `Annotated[jax.Array, "int32[B T]"]` for documentation and checks."""

    def __init__(self, dtype: str):
        self.dtype = dtype

    def __getitem__(self, dims: str) -> Any:
        return Annotated[jax.Array, f"{self.dtype}[{dims}]"]


Int = _Shaped("int32")
Float = _Shaped("float")
Bool = _Shaped("bool")
