"""The generation kernel: one prefill of left-padded prompts, then a `lax.while_loop` decode.

    generate(params, stop_table, batch, seed, *, model, runtime, n_new, copies) -> GenerateResult

Dimension names: `jaxeval.shapes`. Here B = U * copies rows, N = n_new (a bucket >= every row's
`max_new`) and C = P + N cache slots.

Prefill runs the U prompts once at cache index 0 (positions = cumsum(valid) - 1, HF's rule for left
padding). With `copies` > 1 (lm-eval `repeats`, e.g. 8 samples per prompt) the prompt cache and the
last logits are repeated row-wise, so each prompt is prefilled once however many samples it needs:

    U = 2 prompts, copies = 3:  rows 0 1 2 <- prompt 0,   rows 3 4 5 <- prompt 1

Step i picks token i of every row from the current logits (`sampling.next_tokens`), records it, and
updates the row's state: a stop token id (EOS) or a stop string found in the row's text buffer
(`stop_match`) or the row's `max_new` budget ends the row. The loop then feeds the new tokens at
slot P + i (`decode_step`, over the model's public `forward_cached`: the cache is updated in
place, not copied per step, and a step reads only the slots written so far) and exits as soon
as every row is done (or after N tokens), so a batch costs as many decode steps as its longest
row. Finished rows keep computing (fixed shapes) but record nothing.

    row tokens  [t0, t1, t2(EOS), -1, -1]   length 3, reason STOP_TOKEN
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from jaxeval.kernels.decode_step import decode_step
from jaxeval.kernels.sampling import SamplingParams, next_tokens, row_keys
from jaxeval.kernels.stop_match import (
    append_token_bytes,
    empty_buffer,
    stop_found,
    stop_token_hit,
)
from jaxeval.models.contract import ROW_AXES, DecoderModel
from jaxeval.models.runtime import REFERENCE, Runtime
from jaxeval.platform.mesh import constrain_rows
from jaxeval.shapes import Bool, Float, Int

# 1-D shape annotations as names: a lone letter in a string reads as an undefined name to linters
BoolB = Bool["B"]
FloatB = Float["B"]
IntB = Int["B"]
IntV = Int["V"]

# Why a row ended (GenerateResult.reason).
BUDGET = 0  # max_new tokens generated
STOP_TOKEN = 1  # an EOS / stop token id was generated (it is the row's last token)
STOP_STRING = 2  # the row's text contains one of its stop strings
PAD_TOKEN = -1  # in GenerateResult.tokens after a row ended


class GenerateBatch(NamedTuple):
    """One batch of prompts and per-row settings (numpy on the host, sharded on rows on device)."""

    tokens: Int["U P"]  # left-padded prompt tokens
    valid: Bool["U P"]  # False on left padding
    key_ids: Int["B 2"]  # (request index, repeat index): the row's sampling key
    max_new: IntB  # this row's token budget; 0 marks a padding row
    greedy: BoolB
    temperature: FloatB
    top_k: IntB
    top_p: FloatB
    stop_ids: Int["B I"]  # token ids that end the row (-1 = none)
    stops: Int["B Z M"]  # stop strings as right-aligned UTF-8 bytes (STOP_PAD = none)


class StopTable(NamedTuple):
    """Each vocabulary entry's decoded bytes (see `stop_match`); replicated on device."""

    bytes: Int["V Y"]  # int16, right-aligned, NO_BYTE padding
    lengths: IntV  # int32


def apply_stops(
    live: BoolB,
    tok: IntB,
    length: IntB,
    buffer: Int["B Y"],
    reason: IntB,
    stop_table: StopTable,
    rules: Any,
) -> tuple[Int["B Y"], BoolB, IntB]:
    """The stop rules for one picked token per row: (text buffer, ended now, end reason).

    `live` rows append the token's bytes to their buffer; `length` counts the token already;
    `rules` holds the rows' `stop_ids` [B, I], `stops` [B, Z, M] and `max_new` [B] (a
    `GenerateBatch` or the continuous engine's `RowSettings`). A stop token wins over a stop string,
    which wins over the budget; finished rows keep their buffer and reason.
    """
    grown = append_token_bytes(buffer, tok, stop_table.bytes, stop_table.lengths)
    buffer = jnp.where(live[:, None], grown, buffer)
    by_token = live & stop_token_hit(tok, rules.stop_ids)
    by_string = live & ~by_token & stop_found(buffer, rules.stops)
    by_budget = live & (length >= rules.max_new)
    reason = jnp.where(by_token, STOP_TOKEN, jnp.where(by_string, STOP_STRING, reason))
    return buffer, by_token | by_string | by_budget, reason


class GenerateResult(NamedTuple):
    tokens: Int["B N"]  # generated ids, PAD_TOKEN after the row ended
    length: IntB  # tokens generated (a final stop token included)
    reason: IntB  # BUDGET, STOP_TOKEN or STOP_STRING
    steps: Int[""]  # decode steps the batch ran (= longest row)


def _constrain_cache(cache: Any, mesh: Mesh | None) -> Any:
    """A KVCache (or a user model's cache with its fields: `TokenCache`), rows on `ROW_AXES`."""
    return cache._replace(
        **{f: constrain_rows(getattr(cache, f), mesh, d) for f, d in ROW_AXES._asdict().items()}
    )


class _State(NamedTuple):
    step: jax.Array  # int32[]: index of the next token to pick
    cache: Any  # KVCache with B rows
    last: jax.Array  # int32[B]: the token picked at step - 1
    out: jax.Array  # int32[B, N]
    buffer: jax.Array  # int32[B, Y]
    done: jax.Array  # bool[B]
    length: jax.Array  # int32[B]
    reason: jax.Array  # int32[B]


def generate(
    params: Any,
    stop_table: StopTable,
    batch: GenerateBatch,
    seed: Int[""],
    *,
    model: DecoderModel,
    runtime: Runtime = REFERENCE,
    n_new: int,
    copies: int = 1,
    sample: bool = True,
) -> GenerateResult:
    """Prefill + decode loop for one batch (module docstring). Pure; jit with the statics bound.

    `sample=False` compiles argmax only (every row greedy), leaving the sorts and PRNG out.
    """
    u, p = batch.tokens.shape
    b = u * copies
    mesh = runtime.mesh
    sampling = SamplingParams(batch.greedy, batch.temperature, batch.top_k, batch.top_p)
    keys = row_keys(seed, batch.key_ids)  # [B]

    def pick(logits: jax.Array, step: jax.Array) -> jax.Array:
        if not sample:
            return jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return next_tokens(logits, sampling, keys, step)

    # ---- prefill: U prompts, cache slots [0, P) -------------------------------------------
    valid = batch.valid.astype(bool)
    positions = jnp.maximum(jnp.cumsum(valid, axis=1, dtype=jnp.int32) - 1, 0)  # [U, P]
    cache = _constrain_cache(model.init_cache(u, p + n_new), mesh)
    h, cache = model.forward_cached(
        params, cache, batch.tokens, positions, valid, 0, runtime=runtime
    )
    logits = model.head(params, h[:, -1])  # [U, V] (left padding: the last column is real)
    prompt_len = jnp.sum(valid, axis=1, dtype=jnp.int32)  # [U]
    if copies > 1:
        cache = cache._replace(
            k=jnp.repeat(cache.k, copies, axis=1),
            v=jnp.repeat(cache.v, copies, axis=1),
            valid=jnp.repeat(cache.valid, copies, axis=0),
            positions=jnp.repeat(cache.positions, copies, axis=0),
        )
        logits = jnp.repeat(logits, copies, axis=0)  # [B, V]
        prompt_len = jnp.repeat(prompt_len, copies, axis=0)  # [B]
    cache = _constrain_cache(cache, mesh)

    def record(state: _State, tok: jax.Array) -> _State:
        live = ~state.done
        col = jnp.where(live, tok, PAD_TOKEN)[:, None]  # [B, 1]
        out = jax.lax.dynamic_update_slice(state.out, col, (jnp.int32(0), state.step))
        length = state.length + live.astype(jnp.int32)
        buffer, ended, reason = apply_stops(
            live, tok, length, state.buffer, state.reason, stop_table, batch
        )
        done = state.done | ended
        return _State(state.step + 1, state.cache, tok, out, buffer, done, length, reason)

    w = stop_table.bytes.shape[1]
    init = _State(
        step=jnp.int32(0),
        cache=cache,
        last=jnp.zeros((b,), jnp.int32),
        out=jnp.full((b, n_new), PAD_TOKEN, jnp.int32),
        buffer=empty_buffer(b, w),
        done=batch.max_new <= 0,
        length=jnp.zeros((b,), jnp.int32),
        reason=jnp.full((b,), BUDGET, jnp.int32),
    )
    state = record(init, pick(logits, jnp.int32(0)))

    def cond(state: _State) -> jax.Array:
        return (state.step < n_new) & ~jnp.all(state.done)

    def body(state: _State) -> _State:
        i = state.step
        pos = prompt_len + i - 1  # [B] position of the token fed now
        logits, cache = decode_step(
            params, state.cache, state.last, pos, p + i - 1, model=model, runtime=runtime
        )
        state = state._replace(cache=_constrain_cache(cache, mesh))
        return record(state, pick(logits, i))

    state = jax.lax.while_loop(cond, body, state)
    return GenerateResult(
        tokens=state.out, length=state.length, reason=state.reason, steps=state.step
    )
