"""Continuous batching: B engine rows that the host refills from a queue between decode chunks.

    state = init_state(model, rows=B, slots=C, n_new=N, stop_shape=(I, Z, M), buffer=Y)
    prefix = prefill_prefix(params, tokens, valid, *, model)              # a shared prompt prefix, once
    state = admit(params, stop_table, state, prefix, batch, seed, *, model, sample)  # U prompts -> R rows
    state = decode_chunk(params, stop_table, state, seed, want, *, model, sample)    # until `want` free
    state = select_rows(state, keep, runtime=runtime)      # the tail: live rows into a smaller engine

Dimension names: `jaxeval.shapes`. Here U prompts are admitted into R rows (R >= U: `repeats`
copies share one prefill), S is a prefix length, C the cache slots of a row.

**Row layout: positions == slots.** A row's prompt fills its cache from slot 0, with no padding
before it: a shared prefix (slots [0, S), copied from its one-off prefill) and then the row's own
suffix ([S, L)). Generated tokens follow at slots L, L + 1, ... Each row has its own write index
(`index[r]` = slots written = the position of the next token fed), so rows that started at
different times decode side by side (`forward_cached` with a per-row index):

    row 0: [p p p p s s s g g g . .]  index 10      p prefix, s suffix, g generated, . unused
    row 1: [p p p p s g . . . . . .]  index  6
    row 2: [p p p p s s s s s g g g]  done: the host reads its tokens and admits the next prompt,
                                      whose prefill rewrites slots [0, L') and sets index = L'

Slots past a row's index are never read (causal bound), so a refilled row needs no clearing.

**Exactness.** A row's computation depends only on its own tokens: the prefill runs its prompt alone
in its own row, decode steps attend with its own causal bound (blocks past it are fully masked and
leave the online softmax bit for bit unchanged), and its sampling keys are fold_in(fold_in(fold_in(
seed, request), repeat), token index), so tokens do not depend on which rows run beside it, on the
refill order, or on the engine row it lands in.

**When a chunk returns.** `decode_chunk` runs decode steps until every row is done or at least
`want` rows are done (the host sets `want` = free rows it can refill), so refills happen as soon as
they are useful and a chunk never stops for nothing.

**Fewer rows than devices.** An engine whose B rows do not divide over the batch devices (one
row of 131,072 slots on eight chips) keeps every row on every device and splits the slots instead
(`cache_split`, `models.attention.slots`): the state's other leaves are replicated, the cache's
keys and values hold C/n slots a device, `admit` writes each device's slots of the prompt's keys
(`_install`) and the decode steps read and write each device's own (`forward_cached`).

**The tail.** Once the queue is empty, finished rows cannot be refilled, but a decode step still
reads every row's keys and values (and runs every row through the weights), so its cost falls with
the rows it holds, live or not (docs/performance.md has the step times by rows). So when at most
half the rows are live the host moves them into an engine of half the rows or
fewer (`select_rows`: a row gather of the whole state) and decodes on there; a row's tokens do not
depend on the engine it sits in (**Exactness**).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental.layout import Layout, with_layout_constraint

from jaxeval.kernels.decode_step import decode_step
from jaxeval.kernels.generate import BUDGET, PAD_TOKEN, StopTable, apply_stops
from jaxeval.kernels.sampling import SamplingParams, next_tokens, row_keys
from jaxeval.kernels.stop_match import empty_buffer
from jaxeval.models.contract import ROW_AXES, SLOT_AXES, DecoderModel, KVCache
from jaxeval.models.runtime import REFERENCE, Runtime
from jaxeval.platform.mesh import constrain_rows
from jaxeval.shapes import Bool, Float, Int

# 1-D shape annotations as names: a lone letter in a string reads as an undefined name to linters
BoolB = Bool["B"]
FloatB = Float["B"]
IntB = Int["B"]
IntR = Int["R"]
IntT = Int["T"]
BoolT = Bool["T"]


class RowSettings(NamedTuple):
    """Per-row request settings (B rows in the engine state, R rows in an admission)."""

    key_ids: Int["B 2"]  # (request index, repeat index): the row's sampling key
    max_new: IntB  # token budget; 0 = an empty row
    greedy: BoolB
    temperature: FloatB
    top_k: IntB
    top_p: FloatB
    stop_ids: Int["B I"]  # token ids that end the row (-1 = none)
    stops: Int["B Z M"]  # stop strings as right-aligned UTF-8 bytes


class EngineState(NamedTuple):
    """Everything the engine carries between calls (on device, rows sharded; donated each call)."""

    cache: Any  # KVCache: k [L, B, G, E, C], v [L, B, G, C, E]; valid, positions [B, C]
    settings: RowSettings
    index: IntB  # slots written = position of the next token fed
    last: IntB  # the last token picked (fed next)
    out: Int["B N"]  # generated ids, PAD_TOKEN after the row ended
    buffer: Int["B Y"]  # the row's last Y text bytes (stop strings)
    done: BoolB  # the row ended (or is empty): the host may refill it
    length: IntB  # tokens generated (= index of the next token picked)
    reason: IntB  # BUDGET, STOP_TOKEN or STOP_STRING
    steps: Int[""]  # decode steps run so far (statistics)


class AdmitBatch(NamedTuple):
    """U prompts (after their shared prefix) and the R rows they go to (numpy on the host)."""

    tokens: Int["U P"]  # right-padded suffix tokens
    valid: Bool["U P"]  # False on padding
    start: Int[""]  # the shared prefix length S: the suffix's first slot and position
    dst: IntR  # engine row of each admitted request (B = a padding entry, dropped)
    src: IntR  # its prompt, an index into U
    settings: RowSettings  # [R] rows


def row_dims(state: EngineState) -> EngineState:
    """The rows dimension of every leaf (None: replicated), for shardings and constraints."""
    dims = jax.tree.map(lambda _: 0, state)
    return dims._replace(cache=ROW_AXES, steps=None)


def cache_split(cache: Any, runtime: Runtime) -> Any:
    """The slot split of an engine cache (`Runtime.slots_split`: fewer rows than batch devices),
    or None: its rows split as every other leaf's."""
    if not isinstance(cache, KVCache):
        return None
    return runtime.slots_split(rows=cache.valid.shape[0], slots=cache.valid.shape[1])


def _constrain(state: EngineState, runtime: Runtime) -> EngineState:
    mesh = runtime.mesh
    leaves, tree = jax.tree.flatten(state)
    dims = jax.tree.leaves(row_dims(state), is_leaf=lambda d: d is None)
    out = [x if d is None else constrain_rows(x, mesh, d) for x, d in zip(leaves, dims)]
    state = jax.tree.unflatten(tree, out)
    split = cache_split(state.cache, runtime)
    if split is not None:  # (the rows' constraint above is none: they do not divide)
        state = state._replace(cache=split.constrain(state.cache))
    return state


def _kernel_layouts(state: EngineState) -> EngineState:
    """The KV cache's keys and values pinned to row-major layouts, the ones the attention kernels
    read (a TPU Pallas call takes its operands row-major). `decode_chunk` pins them before its
    loop and after every step, so that the loop carries the cache in the kernels' layout: the
    state's own layout (XLA:TPU lays out values [.., C, E] with C minor when E < 128) is then
    converted once on entry and once on exit. Unpinned, libtpu 0.0.50 carries the entry layout
    through the loop and copies the values into the kernel's layout on every step (576 MB a step
    at SmolLM2's shapes on a v5e-8 instead of 342 MB: `tests/plan/test_tpu_plan.py`); libtpu 0.0.42
    moved that copy out of the loop itself. Elsewhere row-major is the default: nothing changes."""
    cache = state.cache
    k, v = (
        with_layout_constraint(x, Layout(major_to_minor=tuple(range(x.ndim))))
        for x in (cache.k, cache.v)
    )
    return state._replace(cache=cache._replace(k=k, v=v))


def init_state(
    model: DecoderModel,
    *,
    rows: int,
    slots: int,
    n_new: int,
    stop_shape: tuple[int, int, int],
    buffer: int,
) -> EngineState:
    """B empty rows (done, budget 0) over a cache of C slots each."""
    n_ids, n_strings, n_bytes = stop_shape
    b = rows
    settings = RowSettings(
        key_ids=jnp.zeros((b, 2), jnp.int32),
        max_new=jnp.zeros((b,), jnp.int32),
        greedy=jnp.ones((b,), bool),
        temperature=jnp.zeros((b,), jnp.float32),
        top_k=jnp.zeros((b,), jnp.int32),
        top_p=jnp.ones((b,), jnp.float32),
        stop_ids=jnp.full((b, n_ids), -1, jnp.int32),
        stops=jnp.full((b, n_strings, n_bytes), -2, jnp.int32),
    )
    return EngineState(
        cache=model.init_cache(b, slots),
        settings=settings,
        index=jnp.zeros((b,), jnp.int32),
        last=jnp.zeros((b,), jnp.int32),
        out=jnp.full((b, n_new), PAD_TOKEN, jnp.int32),
        buffer=empty_buffer(b, buffer),
        done=jnp.ones((b,), bool),
        length=jnp.zeros((b,), jnp.int32),
        reason=jnp.full((b,), BUDGET, jnp.int32),
        steps=jnp.zeros((), jnp.int32),
    )


def _pick(logits, settings: RowSettings, seed, step, sample: bool):
    if not sample:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    params = SamplingParams(settings.greedy, settings.temperature, settings.top_k, settings.top_p)
    return next_tokens(logits, params, row_keys(seed, settings.key_ids), step)


class _Rows(NamedTuple):
    out: Any
    buffer: Any
    done: Any
    length: Any
    reason: Any


def _record(rows: _Rows, tok, settings: RowSettings, stop_table: StopTable) -> _Rows:
    """Appends `tok` to every live row (at its own column `length`) and applies the stop rules."""
    live = ~rows.done
    n = rows.out.shape[1]
    col = jnp.where(live, rows.length, n)  # [B]; n is out of range: dropped
    out = rows.out.at[jnp.arange(tok.shape[0]), col].set(tok, mode="drop")
    length = rows.length + live.astype(jnp.int32)
    buffer, ended, reason = apply_stops(
        live, tok, length, rows.buffer, rows.reason, stop_table, settings
    )
    return _Rows(out, buffer, rows.done | ended, length, reason)


def prefill_prefix(
    params: Any, tokens: IntT, valid: BoolT, *, model: DecoderModel, runtime: Runtime = REFERENCE
) -> Any:
    """A shared prompt prefix's cache (1 row, T slots; positions 0..T-1, padding invalid)."""
    t = tokens.shape[0]
    cache = model.init_cache(1, t)
    positions = jnp.arange(t, dtype=jnp.int32)[None]  # [1, T]
    _, cache = model.forward_cached(
        params, cache, tokens[None], positions, valid[None], 0, runtime=runtime
    )
    return cache


def _forward_new_via_cache(model, params, prefix, tokens, positions, valid, start, *, runtime):
    """`forward_new` for a model with `forward_cached` only: the prompts run in a cache of U rows
    holding the prefix (copied), and their keys/values are read back out of it."""
    u, p = tokens.shape

    def stack(a, b, row, slot):  # the prefix (1 row) broadcast to U rows, then the suffix's slots
        shape = list(a.shape)
        shape[row] = u
        return jnp.concatenate([jnp.broadcast_to(a, shape).astype(b.dtype), b], axis=slot)

    small = jax.tree.map(stack, prefix, model.init_cache(u, p), ROW_AXES, SLOT_AXES)
    h, small = model.forward_cached(params, small, tokens, positions, valid, start, runtime=runtime)
    k = jax.lax.dynamic_slice_in_dim(small.k, start, p, axis=SLOT_AXES.k)  # [L, U, G, E, P]
    v = jax.lax.dynamic_slice_in_dim(small.v, start, p, axis=SLOT_AXES.v)  # [L, U, G, P, E]
    return h, k.transpose(0, 1, 4, 2, 3), v.transpose(0, 1, 3, 2, 4)


def _install(
    cache, prefix, k_new, v_new, valid, positions, batch: AdmitBatch, split=None, order=None
):
    """Engine rows dst <- the prefix's slots [0, S') (all rows) and then each admitted row's own
    prompt (`src`) at slots [start, start + P), keys/values [L, U, P, G, E] from `forward_new`;
    padding entries (dst = B) and slots past C are dropped. Slots past a row's prompt keep what
    the row held before; its causal bound never reads them. `split`: the engine's slots split
    over the devices (`cache_split`): each device writes its own slots' keys and values;
    `order`: the keys/values come in the order of the prompts' token split (`Split`)."""
    dst, src = batch.dst, batch.src
    sp, p = prefix.valid.shape[1], valid.shape[1]
    r = dst.shape[0]
    start = jnp.asarray(batch.start, jnp.int32)
    if split is not None:
        cache = split.install(
            cache, k_new, v_new, dst, src, start, prefix, chunk=0 if order is None else order.chunk
        )
        flags = []
        for buf, pre, new in (
            (cache.valid, prefix.valid, valid),
            (cache.positions, prefix.positions, positions),
        ):  # the [B, C] flags, whole on every device
            if sp:
                buf = buf.at[dst, :sp].set(jnp.broadcast_to(pre, (r, sp)), mode="drop")
            rows = dst[:, None]
            slots = (start + jnp.arange(p, dtype=jnp.int32))[None, :]
            flags.append(buf.at[rows, slots].set(new[src].astype(buf.dtype), mode="drop"))
        return cache._replace(valid=flags[0], positions=flags[1])
    if sp:  # every admitted row gets the prefix's slots [0, S')

        def put_prefix(buf, pre, row, slot):
            at = [slice(None)] * buf.ndim
            at[row], at[slot] = dst, slice(0, sp)
            shape = list(pre.shape)
            shape[row] = r
            return buf.at[tuple(at)].set(
                jnp.broadcast_to(pre, shape).astype(buf.dtype), mode="drop"
            )

        cache = jax.tree.map(put_prefix, cache, prefix, ROW_AXES, SLOT_AXES)
    rows = dst[:, None]  # [R, 1]
    slots = (start + jnp.arange(p, dtype=jnp.int32))[None, :]
    # k[:, dst[r], :, :, start + t] <- k_new[:, src[r], t]: the indexed axes go first, [R, P, ...]
    k_rows = jnp.take(k_new, src, axis=1).transpose(1, 2, 0, 3, 4)  # [R, P, L, G, E]
    v_rows = jnp.take(v_new, src, axis=1).transpose(1, 2, 0, 3, 4)
    return type(cache)(
        k=cache.k.at[:, rows, :, :, slots].set(k_rows.astype(cache.k.dtype), mode="drop"),
        v=cache.v.at[:, rows, :, slots].set(v_rows.astype(cache.v.dtype), mode="drop"),
        valid=cache.valid.at[rows, slots].set(valid[src], mode="drop"),
        positions=cache.positions.at[rows, slots].set(positions[src], mode="drop"),
    )


def admit(
    params: Any,
    stop_table: StopTable,
    state: EngineState,
    prefix: Any,
    batch: AdmitBatch,
    seed: Int[""],
    *,
    model: DecoderModel,
    runtime: Runtime = REFERENCE,
    sample: bool,
) -> EngineState:
    """Prefills U prompts after their shared prefix and installs them in R engine rows.

    The U suffixes run at positions S, S + 1, ... over the prefix cache (1 row of S' slots, the
    prefix in [0, S); `model.forward_new`), which returns their keys/values without writing them.
    `_install` then writes each admitted row r straight into engine row dst[r]: the prefix's slots
    and prompt src[r]'s keys at [S, S + P). Each row picks its first token from the logits at its
    prompt's last token and records it; `repeats` copies share the prefill. (Building a U-row cache
    of S' + P slots and copying it into the rows costs ~20 passes over its keys/values instead;
    docs/performance.md.)
    """
    u, p = batch.tokens.shape
    start = jnp.asarray(batch.start, jnp.int32)
    valid = batch.valid.astype(bool)
    positions = start + jnp.arange(p, dtype=jnp.int32)[None, :] * jnp.ones((u, 1), jnp.int32)
    new = getattr(model, "forward_new", None)
    split = cache_split(state.cache, runtime)
    order = None  # the prompts' keys in token order, else the order of their token split
    if split is not None and new is not None and "split_keys" in inspect.signature(new).parameters:
        order = runtime.prompt_split(rows=u, length=p)
    if new is None:  # a model with forward_cached only
        new = functools.partial(_forward_new_via_cache, model)
    kw = {"split_keys": True} if order is not None else {}
    h, k_new, v_new = new(
        params, prefix, batch.tokens, positions, valid, start, runtime=runtime, **kw
    )
    n_tokens = jnp.sum(valid, axis=1, dtype=jnp.int32)  # [U]
    h_last = h[jnp.arange(u), jnp.maximum(n_tokens - 1, 0)]  # [U, D]
    logits = model.head(params, h_last)[batch.src]  # [R, V]

    # the R admitted rows, fresh, with their first token
    r = batch.src.shape[0]
    n = state.out.shape[1]
    settings = batch.settings
    rows = _Rows(
        out=jnp.full((r, n), PAD_TOKEN, jnp.int32),
        buffer=empty_buffer(r, state.buffer.shape[1]),
        done=settings.max_new <= 0,
        length=jnp.zeros((r,), jnp.int32),
        reason=jnp.full((r,), BUDGET, jnp.int32),
    )
    tok = _pick(logits, settings, seed, jnp.int32(0), sample)
    rows = _record(rows, tok, settings, stop_table)

    cache = _install(state.cache, prefix, k_new, v_new, valid, positions, batch, split, order)
    dst = batch.dst

    def set_rows(buf, new):
        return buf.at[dst].set(new.astype(buf.dtype), mode="drop")

    state = EngineState(
        cache=cache,
        settings=jax.tree.map(set_rows, state.settings, settings),
        index=set_rows(state.index, (start + n_tokens)[batch.src]),
        last=set_rows(state.last, tok),
        out=set_rows(state.out, rows.out),
        buffer=set_rows(state.buffer, rows.buffer),
        done=set_rows(state.done, rows.done),
        length=set_rows(state.length, rows.length),
        reason=set_rows(state.reason, rows.reason),
        steps=state.steps,
    )
    return _constrain(state, runtime)


def select_rows(state: EngineState, keep: IntR, *, runtime: Runtime = REFERENCE) -> EngineState:
    """The rows `keep` of the engine (R old row indices, in their new order) as an R-row state."""
    leaves, tree = jax.tree.flatten(state)
    dims = jax.tree.leaves(row_dims(state), is_leaf=lambda d: d is None)
    out = [x if d is None else jnp.take(x, keep, axis=d) for x, d in zip(leaves, dims)]
    return _constrain(jax.tree.unflatten(tree, out), runtime)


def decode_chunk(
    params: Any,
    stop_table: StopTable,
    state: EngineState,
    seed: Int[""],
    want: Int[""],
    *,
    model: DecoderModel,
    runtime: Runtime = REFERENCE,
    sample: bool,
    steps_per_iteration: int = 1,
) -> EngineState:
    """Decode steps for every live row until all rows are done or at least `want` rows are done.

    Each step feeds every live row's last token at its own slot `index[r]` (= its position) and
    records the next one at its own column; done rows feed at slot 0 of their own (dead) cache, so
    the steps read only up to the largest live index. `steps_per_iteration` steps run between two
    checks of the condition (a row done stays done, so more only overshoots `want`): the TPU plan
    counts one step's cost as the difference between 2 and 1 (`jaxeval.plan.costs.step_costs`).
    """
    state = _kernel_layouts(_constrain(state, runtime))

    def cond(st: EngineState) -> jax.Array:
        n_done = jnp.sum(st.done, dtype=jnp.int32)
        return ~jnp.all(st.done) & (n_done < want)

    def body(st: EngineState) -> EngineState:
        live = ~st.done
        index = jnp.where(live, st.index, 0)  # [B]
        logits, cache = decode_step(
            params, st.cache, st.last, index, index, model=model, runtime=runtime
        )
        tok = _pick(logits, st.settings, seed, st.length, sample)
        rows = _record(
            _Rows(st.out, st.buffer, st.done, st.length, st.reason), tok, st.settings, stop_table
        )
        st = EngineState(
            cache=cache,
            settings=st.settings,
            index=st.index + live.astype(jnp.int32),
            last=jnp.where(live, tok, st.last),
            out=rows.out,
            buffer=rows.buffer,
            done=rows.done,
            length=rows.length,
            reason=rows.reason,
            steps=st.steps + 1,
        )
        return _kernel_layouts(_constrain(st, runtime))

    def steps(st: EngineState) -> EngineState:
        for _ in range(steps_per_iteration):
            st = body(st)
        return st

    return jax.lax.while_loop(cond, steps, state)
