"""The dimension glossary: every name used in shape annotations and `# [B, T]` shape comments.

One name, one meaning, in every module of `jaxeval/` and `jaxeval/kernels/`; a module says which of these
its arrays use and how they relate (`B = U * copies`), never what a name means.
`tests/test_shape_glossary.py` checks every `Int["..."]` / `Float["..."]` / `Bool["..."]` and every
shape comment against `GLOSSARY` (its docstring gives the exact rule). Products and quotients of
names are shapes too: `[B*K, D]`, `[T/Q]`, `[E'/2]`.

    Batches     B   rows in a batch                    T   padded row length (tokens)
                R   requests                           S   request slots per batch
                K   score points per row               W   rolling-window length
    Model       D   model width (hidden size)           F   MLP hidden width
                V   vocabulary size                    L   layers
                H   query heads                        G   key/value heads (GQA groups)
                X   query heads per key/value head     E   head dimension
                E'  rotary features per head (E times the partial-rotary fraction)
    Attention   J   keys attended: T in packed rows, C with a KV cache
                Q   rows of a query block or a key block (blocked attention)
                A   blocks per row (T/Q)
                Aq  query blocks one call holds (a device's share of A under sequence parallelism)
    Generation  U   unique prompts                     P   padded prompt length
                N   new tokens to generate             C   KV-cache length (slots)
                I   stop token ids per row             Z   stop strings per row
                M   bytes per stop string              Y   text-buffer bytes per row
    Scoring     Vc  vocabulary entries per LM-head chunk
    Experts     Nx  routed experts of an MoE layer     Kx  experts per token (the top-k)
                Fx  one expert's hidden width           Fs  the shared experts' hidden width
    Latent      En  non-rotary q/k features per head   Ev  value features per head
    attention   Rq  query latent features              Rkv key/value latent features

Kernels annotate with jaxtyping-style strings, `Int["B T"]`; this module gives the aliases so that
annotations need no extra dependency at run time.
"""

from __future__ import annotations

from typing import Annotated, Any

import jax

GLOSSARY = {
    # batches and requests
    "B": "rows in a batch",
    "T": "padded row length",
    "R": "requests",
    "S": "request slots per batch",
    "K": "score points per row",
    "W": "rolling-window length",
    # model
    "D": "model width",
    "F": "MLP hidden width",
    "V": "vocabulary size",
    "L": "layers",
    "H": "query heads",
    "G": "key/value heads",
    "X": "query heads per key/value head (H/G)",
    "E": "head dimension",
    "E'": "rotary features per head",
    # attention
    "J": "keys attended (T in packed rows, C with a KV cache)",
    "Q": "rows of a query block or a key block",
    "A": "blocks per row (T/Q)",
    "Aq": "query blocks one call holds (sequence parallelism: a device's share of A)",
    # generation
    "U": "unique prompts",
    "P": "padded prompt length",
    "N": "new tokens to generate",
    "C": "KV-cache length",
    "I": "stop token ids per row",
    "Z": "stop strings per row",
    "M": "bytes per stop string",
    "Y": "text-buffer bytes per row",
    # scoring
    "Vc": "vocabulary entries per LM-head chunk",
    # Mixture of Experts
    "Nx": "routed experts of an MoE layer",
    "Kx": "experts per token (the top-k)",
    "Fx": "one expert's hidden width",
    "Fs": "the shared experts' hidden width",
    # latent attention (MLA): the rotary features per head are E'
    "En": "non-rotary q/k features per head",
    "Ev": "value features per head",
    "Rq": "query latent features",
    "Rkv": "key/value latent features",
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


def pow2_at_least(n: int, floor: int = 1) -> int:
    """The smallest power of two >= n, and at least `floor`: 5 -> 8, 8 -> 8, 0 -> 1."""
    return max(int(floor), 1 << max(0, (int(n) - 1).bit_length()))


def pow2_at_most(n: int) -> int:
    """The largest power of two <= n (at least 1): 5 -> 4, 8 -> 8, 0 -> 1."""
    return 1 << max(0, int(n).bit_length() - 1)
