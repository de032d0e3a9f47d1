"""`FunctionModel`: any JAX function (a Flax nnx or linen module, plain code) behind the kernels'
model contract, the one `ModelSpec` implements.

Two ways in, chosen by the functions given (glossary letters from `jaxeval.shapes`):

    hidden(params, tokens, positions, segment_ids, parent_ids) -> [B, T, D]   (final norm included)
      + head_weight(params) -> [V, D]          scored by the usual kernel (LM head in vocabulary
                                               chunks at the score points only; never [B, T, V])
      or head(params, h [..., D]) -> [..., V]  the head applied at the score points: [B, K, V]
    logits(params, tokens, positions, attention_mask) -> [B, T, V]           (mask-only models)

`hidden` must apply jaxeval's attention rule, which covers padding, packed rows and a multiple-choice
context shared by its choices: token i sees token j iff segment_ids[j] != 0, j <= i, and
segment_ids[j] in (segment_ids[i], parent_ids[i]). `attention_mask(segment_ids, parent_ids)` builds
that [B, T, T] mask for a model that takes an explicit mask:

    tokens       <s>  Q  :  A | B        the context is segment 1, choice " A" segment 2 and
    segment_ids   1   1  1  2   3        choice " B" segment 3, both with parent 1: " B" sees
    parent_ids    0   0  0  1   1        <s> Q : and itself, not " A"; positions restart per
    positions     0   1  2  3   3        context and continue from it in each choice

A `logits` model gets `attention_mask` as `mask="segments"` (that [B, T, T] rule: rows stay packed)
or `mask="padding"` (HF-style [B, T] with 1 on real tokens: the model adds its own causal mask, so
rows hold one request each, right-padded: `InMemoryLM` then sets packing=False and
shared_context=False). Either way the model materializes [B, T, V] logits (the hidden path never
does), and a padded plan computes more tokens than a packed one (`lm.stats["efficiency"]`).

**Generation.** With `init_cache` and `forward_cached` given, decoding uses them, exactly as
`ModelSpec` does: `init_cache(batch, length)` returns a `jaxeval.models.KVCache` (k, v with rows
on axis 1, in any layout of yours; valid [B, C], positions [B, C]) and `forward_cached(params,
cache, tokens, positions, valid, index) -> ([B, T, D], cache)` writes slots [index, index + T).
Without them, generation **recomputes**: the "cache" holds the token ids written so far (`TokenCache`) and every
decode step runs the full model over all C = prompt + new-token slots, then reads the new position
(`hidden` with segment_ids = valid, or `logits` with the mask above). That costs about C / 2 times
the work of a cached decode per generated token; right for evaluation during training on short
generations, slow for long ones.

The adapter is hashable by identity (it is a static argument of the compiled kernels): keep the
same object across evaluations and nothing recompiles.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxeval.errors import JaxevalError
from jaxeval.models.attention import packed_mask
from jaxeval.models.contract import Capabilities, Hidden, Rows
from jaxeval.shapes import Bool, Float, Int

MASK_KINDS = ("segments", "padding")


def attention_mask(segment_ids: Int["B T"], parent_ids: Int["B T"]) -> Bool["B T T"]:
    """jaxeval's attention rule as an explicit [B, T(query), T(key)] boolean mask (module docstring)."""
    return packed_mask(segment_ids, parent_ids)


class TokenCache(NamedTuple):
    """The recomputation fallback's "cache": the tokens written so far, not keys and values.

    The generation kernel repeats and shards a cache by its k (rows on axis 1), v, valid and
    positions fields, so the token ids ride in `k`:

    k          int32[1, B, C]  token id per slot
    v          int32[1, B, 1]  unused (keeps the kernel's row bookkeeping uniform)
    valid      bool[B, C]      slot holds a real token
    positions  int32[B, C]     that token's position
    """

    k: jax.Array
    v: jax.Array
    valid: jax.Array
    positions: jax.Array


class FunctionModel:
    """User functions behind the model contract (module docstring); hashable by identity.

    FunctionModel(vocab_size=V, hidden=fn, head_weight=fn)       # packed rows, chunked LM head
    FunctionModel(vocab_size=V, hidden=fn, head=fn)              # head applied at score points
    FunctionModel(vocab_size=V, logits=fn, mask="padding")       # mask-only model, padded rows
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        hidden: Callable | None = None,
        head_weight: Callable | None = None,
        head: Callable | None = None,
        logits: Callable | None = None,
        mask: str = "segments",
        finalize_logits: Callable | None = None,
        init_cache: Callable | None = None,
        forward_cached: Callable | None = None,
        model_type: str = "function",
        compute_dtype: str = "float32",
    ):
        problems = []
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1:
            problems.append(("vocab_size", f"must be a positive int, got {vocab_size!r}"))
        if logits is not None and any(f is not None for f in (hidden, head_weight, head)):
            problems.append(("logits", "give either logits, or hidden with a head, not both"))
        if logits is None and hidden is None:
            problems.append(("hidden", "give hidden (with head_weight or head) or logits"))
        if hidden is not None and (head_weight is None) == (head is None):
            problems.append(("head_weight", "give exactly one of head_weight and head"))
        if mask not in MASK_KINDS:
            problems.append(("mask", f"{mask!r} is not one of {MASK_KINDS}"))
        if (init_cache is None) != (forward_cached is None):
            problems.append(("forward_cached", "give init_cache and forward_cached together"))
        if logits is not None and init_cache is not None:
            problems.append(("init_cache", "a logits model generates by recomputation only"))
        if finalize_logits is not None and head_weight is None:
            problems.append(
                ("finalize_logits", "only with head_weight (head and logits return final logits)")
            )
        for name, fn in (
            ("hidden", hidden),
            ("head_weight", head_weight),
            ("head", head),
            ("logits", logits),
            ("finalize_logits", finalize_logits),
            ("init_cache", init_cache),
            ("forward_cached", forward_cached),
        ):
            if fn is not None and not callable(fn):
                problems.append((name, f"must be callable, got {type(fn).__name__}"))
        if problems:
            field, message = problems[0]
            raise JaxevalError(
                f"FunctionModel: {message}",
                field=field,
                hint="see jaxeval.inmemory.FunctionModel's docstring for the contract",
            )
        self.vocab_size = int(vocab_size)
        self.model_type = str(model_type)
        self.compute_dtype = str(compute_dtype)
        self.mask = mask
        self._hidden, self._head_weight, self._head, self._logits = (
            hidden,
            head_weight,
            head,
            logits,
        )
        self._finalize = finalize_logits
        self._init_cache, self._forward_cached = init_cache, forward_cached

    def __repr__(self) -> str:
        return f"FunctionModel({self.model_type!r}, {self.kind}, vocab_size={self.vocab_size})"

    # ---- what the adapter can do ----------------------------------------------------------
    @property
    def kind(self) -> str:
        """ "logits" (a mask-only model) or "hidden" (hidden states plus a head)."""
        return "logits" if self._logits is not None else "hidden"

    @property
    def has_head_weight(self) -> bool:
        """True: the usual chunked-head scoring kernel applies; False: `point_logits` scores."""
        return self._head_weight is not None

    @property
    def packs(self) -> bool:
        """Whether rows may hold several requests (False only for mask="padding" logits models)."""
        return self._logits is None or self.mask == "segments"

    @property
    def caches(self) -> bool:
        """Whether generation uses a user KV cache (False: recomputation, see the docstring)."""
        return self._init_cache is not None

    @property
    def capabilities(self) -> Capabilities:
        """A user KV cache when one is given; the model's own runtime, layout and cache index."""
        return Capabilities(
            kv_cache=self.caches,
            per_row_cache_index=bool(getattr(self, "per_row_cache_index", False)),
        )

    # ---- the kernels' contract ------------------------------------------------------------
    def hidden(
        self,
        params: Any,
        tokens: Rows,
        positions: Rows,
        segment: Rows,
        parent: Rows,
        *,
        runtime: Any = None,  # the caller's function decides how it runs
    ) -> Hidden:
        if self._hidden is None:
            raise JaxevalError(
                "this FunctionModel has logits only; it is scored through point_logits",
                field="hidden",
            )
        return self._hidden(params, tokens, positions, segment, parent)

    def head_weight(self, params: Any) -> Float["V D"]:
        """The [V, D] output embedding; a zero-width [V, 0] placeholder when there is none (it only
        carries V, e.g. for `jax.eval_shape`; multiplying hidden states by it fails to trace)."""
        if self._head_weight is not None:
            return self._head_weight(params)
        return jnp.zeros((self.vocab_size, 0), jnp.float32)

    def finalize_logits(self, logits: jax.Array) -> jax.Array:
        return logits if self._finalize is None else self._finalize(logits)

    def head(self, params: Any, h: Float["... D"]) -> Float["... V"]:
        """Logits from hidden states; for a logits model `h` already is logits (identity)."""
        if self._logits is not None:
            return h
        if self._head is not None:
            return self._head(params, h)
        w = self._head_weight(params).astype(h.dtype)
        return self.finalize_logits(jnp.einsum("...d,vd->...v", h, w, precision="highest"))

    def point_logits(  # points: Int["B K"], positions in [0, T)
        self, params: Any, tokens: Rows, positions: Rows, segment: Rows, parent: Rows, points: Any
    ) -> Float["B K V"]:
        """Logits at the score positions `points` (in [0, T)): hidden + head there, or the full
        logits gathered there."""
        if self._logits is not None:
            full = self._logits(params, tokens, positions, self._mask(segment, parent))
            return jnp.take_along_axis(full, points[:, :, None], axis=1)  # [B, K, V]
        h = self._hidden(params, tokens, positions, segment, parent)  # [B, T, D]
        hk = jnp.take_along_axis(h, points[:, :, None], axis=1)  # [B, K, D]
        return self.head(params, hk)

    def _mask(self, segment: Int["B T"], parent: Int["B T"]) -> jax.Array:
        if self.mask == "padding":
            return (segment != 0).astype(jnp.int32)  # [B, T]
        return attention_mask(segment, parent)  # [B, T, T]

    def init_cache(self, batch: int, length: int, dtype: Any = None) -> Any:
        if self._init_cache is not None:
            return self._init_cache(batch, length, dtype or self.compute_dtype)
        return TokenCache(
            k=jnp.zeros((1, batch, length), jnp.int32),
            v=jnp.zeros((1, batch, 1), jnp.int32),
            valid=jnp.zeros((batch, length), bool),
            positions=jnp.zeros((batch, length), jnp.int32),
        )

    def forward_cached(
        self,
        params: Any,
        cache: Any,
        tokens: Int["B T"],
        positions: Int["B T"],
        valid: Bool["B T"],
        index: Int[""],
        *,
        runtime: Any = None,  # the caller's function decides how it runs
    ) -> tuple[Float["B T D"], Any]:
        """The user's cached forward, or the recomputation fallback: writes the T new tokens at
        slots [index, index + T) and runs the whole model over all C slots, then returns the new
        slots' hidden states (logits for a logits model; `head` is then the identity)."""
        if self._forward_cached is not None:
            return self._forward_cached(params, cache, tokens, positions, valid, index)
        zero = jnp.zeros((), jnp.int32)
        index = jnp.asarray(index, jnp.int32)
        ids = jax.lax.dynamic_update_slice(cache.k[0], tokens.astype(jnp.int32), (zero, index))
        slot_valid = jax.lax.dynamic_update_slice(cache.valid, valid.astype(bool), (zero, index))
        slot_pos = jax.lax.dynamic_update_slice(
            cache.positions, positions.astype(jnp.int32), (zero, index)
        )
        segment = slot_valid.astype(jnp.int32)  # [B, C]: one segment of the valid slots
        parent = jnp.zeros_like(segment)
        if self._logits is not None:
            out = self._logits(params, ids, slot_pos, self._mask(segment, parent))  # [B, C, V]
        else:
            out = self._hidden(params, ids, slot_pos, segment, parent)  # [B, C, D]
        new = jax.lax.dynamic_slice_in_dim(
            out, index, tokens.shape[1], axis=1
        )  # [B, T, D] or [B, T, V]
        return new, TokenCache(k=ids[None], v=cache.v, valid=slot_valid, positions=slot_pos)

    # ---- parameters -----------------------------------------------------------------------
    def param_count(self, params: Any = None) -> int:
        if params is None:
            return 0
        return int(sum(math.prod(jnp.shape(x)) for x in jax.tree.leaves(params)))
