"""The model contract of the kernels: what `jaxeval/kernels/score.py`, `jaxeval/kernels/generate.py` and
`jaxeval/kernels/decode_step.py` call on a model, and nothing more.

`jaxeval.models.ModelSpec` (our decoders) implements it; so does any object handed to the kernels
in its place (an in-memory model from a training loop, `jaxeval.inmemory`). The object is a static
argument of `jax.jit`, so it must be hashable and compare equal when it describes the same
computation: two equal objects share compiled executables. Parameters are never part of it; they
are the kernels' first argument (any pytree of arrays).

    class MyModel:                      # a frozen dataclass, typically
        model_type = "mine"; vocab_size = 32000
        def hidden(self, params, tokens, positions, segment, parent, *, runtime): ...  # [B, T, D]
        ...
    isinstance(MyModel(), DecoderModel)  -> True (method names only; the shapes are the contract)

Dimension names: `jaxeval.shapes`.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax

from jaxeval.shapes import Float, Int


class KVCache(NamedTuple):
    """Keys/values for every layer plus per-slot bookkeeping; a pytree.

    k          [L, B, G, E, C]  keys, transposed (slots minor), in the cache dtype
    v          [L, B, G, C, E]  values, heads-major, in the cache dtype
    valid      [B, C] bool      slot holds a real (non-padding) token
    positions  [B, C] int32     that token's position (for sliding windows)

    `ROW_AXES` and `SLOT_AXES` name each field's rows and slots axes. The two layouts make both
    attention matmuls over a cache block contract over the right operand's major axis (q [X, E] . k [E, C'], p [X, C'] . v [C', E]),
    the form XLA:CPU's dot runs at memory speed; with k, v as [L, B, C, G, E] a decode step's
    attention was slower (docs/performance.md, "The KV cache layout").

    The layout is part of the contract: the kernels that move rows or slots between caches
    (`jaxeval/kernels/generate.py`, `jaxeval/kernels/continuous.py`) read `ROW_AXES` / `SLOT_AXES`, never a
    literal axis, and every attention backend (`jaxeval.models.attention`) reads it.
    """

    k: jax.Array
    v: jax.Array
    valid: jax.Array
    positions: jax.Array


ROW_AXES = KVCache(k=1, v=1, valid=0, positions=0)  # where each field keeps its B rows
SLOT_AXES = KVCache(k=4, v=3, valid=1, positions=1)  # ... and its C slots


class Capabilities(NamedTuple):
    """What a model declares beyond the contract's methods, as a class attribute
    `capabilities = Capabilities(...)` (`capabilities_of` reads it; a model that declares nothing
    has none of them). Everything the run decides from the kind of model reads these, never the
    model's type.

    backends             its layers run on the `Runtime`'s attention and expert backends (our
                         decoders); without it the model runs its own way on its mesh's reference
                         runtime
    kv_cache             generation writes and reads a KV cache (`init_cache`, `forward_cached`);
                         without it each step recomputes the sequence
    per_row_cache_index  `forward_cached` also takes int32[B], one cache index per row: the
                         continuous engine (`jaxeval.lm.generate.engine`) can refill rows
    layout               parameters in jaxeval's layout (`param_layout`): the spec counts them
                         (`body_param_count`, for the scoring planner's point cost) and knows its
                         context (`max_position_embeddings`)
    """

    backends: bool = False
    kv_cache: bool = False
    per_row_cache_index: bool = False
    layout: bool = False


def capabilities_of(model: Any) -> Capabilities:
    """`model.capabilities`; for a model that declares none, the older class flag
    `per_row_cache_index = True` alone."""
    declared = getattr(model, "capabilities", None)
    if isinstance(declared, Capabilities):
        return declared
    return Capabilities(per_row_cache_index=bool(getattr(model, "per_row_cache_index", False)))


Rows = Int["B T"]  # one int32 per token of each packed row
Hidden = Float["B T D"]


@runtime_checkable
class DecoderModel(Protocol):
    """A causal decoder as the kernels see it (static, hashable; parameters passed separately)."""

    model_type: str  # reported in results (`model_info`) and keyed in the response cache
    vocab_size: int  # the embedding table's rows: every token id must be below it

    def hidden(
        self,
        params: Any,
        tokens: Rows,
        positions: Rows,
        segment: Rows,
        parent: Rows,
        *,
        runtime: Any,
    ) -> Hidden:
        """Packed rows -> final-normed hidden states. Query i sees key j iff segment[j] != 0,
        j <= i and (segment[j] == segment[i] or segment[j] == parent[i]); positions restart per
        request and continue from the parent in a child segment (`jaxeval.models.attention`).
        `runtime` (`jaxeval.models.runtime.Runtime`, static) is how the kernels run the model:
        its mesh and backends; a model that runs its own way may ignore it."""
        ...

    def head_weight(self, params: Any) -> Float["V D"]:
        """The LM head's weight (the embedding table when tied); logits = h @ weight.T."""
        ...

    def finalize_logits(self, logits: jax.Array) -> jax.Array:
        """What follows the head's matmul (soft-capping, scaling); the identity for most models."""
        ...

    def head(self, params: Any, h: Float["... D"]) -> Float["... V"]:
        """Hidden states -> final logits (`finalize_logits(h @ head_weight(params).T)`)."""
        ...

    def init_cache(self, batch: int, length: int, dtype: Any = None) -> Any:
        """An empty KV cache of `length` slots for `batch` rows (a pytree with `k`, `v`, `valid`,
        `positions`, rows on `ROW_AXES`: `KVCache`)."""
        ...

    def forward_cached(  # tokens, positions: Rows; valid: Bool["B T"]; index: Int[""]
        self,
        params: Any,
        cache: Any,
        tokens: Rows,
        positions: Rows,
        valid: Any,
        index: Any,
        *,
        runtime: Any,
    ) -> tuple[Hidden, Any]:
        """Writes T tokens at cache slots [index, index + T) and returns their hidden states;
        query t sees slot j iff valid[j] and j <= index + t. `index` is int32[] (all rows); a model
        that declares `Capabilities(per_row_cache_index=True)` (our `ModelSpec` does) also takes
        int32[B], one slot per row, and then gets continuous batching (`jaxeval.lm.generate.engine`)."""
        ...

    def param_count(self, params: Any = None) -> int:
        """Parameters in `params` (reported in results)."""
        ...
