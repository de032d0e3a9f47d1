"""How many rows the continuous generation engine runs: from the memory a device has left after the
parameters. One rule for `jaxeval run` (the device's own free memory) and `jaxeval plan --topology`
(a TPU chip's HBM the compiler allows, less the parameters' shard).

    engine_rows(spec, free_bytes=..., shards=8, slots=2048, wanted=64)   # -> rows, the fit
    EngineFit.text()   # "64 rows x 2,048 slots: KV cache 1.2 GiB + temporaries 0.3 GiB of 7.9 GiB"

Per device, an engine of R rows (split over the S batch shards) x C slots holds:

    cache        R / S rows of `spec.init_cache(1, C)` (keys, values, slot flags, positions)
    per row      the decode step's float32 logits twice [V] and one row's attention scores [H, C]
    admission    one `admit` call: ADMIT_TOKENS padded tokens (or one prompt of C) times
                 the scoring budget's per-token activations (`budget.activation_bytes_per_token`,
                 a float32 estimate, scaled to the compute dtype); a prompt of C whose tokens
                 split over the S shards (`models.attention.sequence`) holds 1/S of them, plus
                 one layer's keys and values of all C gathered, plus every layer's keys and
                 values of the prompt: all of them on the chip whose row it fills (1/S of them
                 when the slots split, below)

An engine of R < S rows splits each row's C slots over the S shards instead
(`models.attention.slots`, when C cuts into S pieces of whole lanes): a device holds R / S of
the rows' caches and each row's attention scores over C / S slots.

`wanted` rows (the batch size asked for, or the default) halve while that exceeds ENGINE_SHARE of
the free memory, down to S; below S only while S rows exceed the free memory and the slots
split (one row of 131,072 slots of an 8B model over the 8 chips of a v5e-8). A `gen_batch_size`
given explicitly (below S too, when the slots split) is kept when the cache and its
temporaries fit all of the free memory, else it is an error that names the largest row count that
fits; a shape whose S rows do not fit at all says so, with what to change. On the CPU the free
memory is the host's available memory (`budget.host_free_bytes`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from jaxeval.errors import JaxevalError
from jaxeval.lm.generate.plan import prefill_bucket
from jaxeval.lm.score.budget import activation_bytes_per_token, device_free_bytes, host_free_bytes
from jaxeval.models.attention.sequence import tokens_split
from jaxeval.models.attention.slots import slot_splits

ADMIT_TOKENS = 2048  # padded suffix tokens one `admit` call prefills at most (or one prompt)
ENGINE_SHARE = 0.5  # of the free memory the engine's cache and temporaries may take by default
GIB = 1 << 30


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


@dataclasses.dataclass(frozen=True)
class EngineFit:
    """An engine shape against one device's free memory (bytes per device)."""

    rows: int
    slots: int
    shards: int
    cache_bytes: int
    temp_bytes: int
    free_bytes: int | None

    @property
    def total_bytes(self) -> int:
        return self.cache_bytes + self.temp_bytes

    def text(self) -> str:
        free = "" if self.free_bytes is None else f" of {_gib(self.free_bytes)} free"
        return (
            f"{self.rows:,} rows x {self.slots:,} slots: KV cache {_gib(self.cache_bytes)} "
            f"+ temporaries {_gib(self.temp_bytes)} per device{free}"
        )


def free_bytes_per_device(mesh: Any) -> int:
    """What a device of `mesh` has free: its own memory on an accelerator; on the CPU, the host's
    available memory shared by the mesh's devices of this process."""
    free = device_free_bytes(mesh)
    if free is not None:
        return free
    local = sum(1 for d in mesh.devices.flat if d.process_index == jax.process_index())
    return host_free_bytes() // max(1, local)


def cache_row_bytes(spec: Any, slots: int) -> int:
    """Bytes of one engine row's cache of `slots` slots (every leaf of `init_cache(1, slots)`)."""
    cache = jax.eval_shape(lambda: spec.init_cache(1, slots))
    return int(sum(np.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(cache)))


def engine_fit(
    spec: Any, *, rows: int, slots: int, shards: int, free_bytes: int | None
) -> EngineFit:
    """The per-device bytes of an engine of `rows` x `slots` (module docstring)."""
    split = slot_splits(int(shards), int(rows), int(slots))  # every row, 1/S of its slots
    local = int(rows) if split else -(-int(rows) // max(1, int(shards)))
    per_row = cache_row_bytes(spec, slots)
    held = int(slots) // int(shards) if split else int(slots)  # the slots a row's scores span
    per_row = -(-per_row // int(shards)) if split else per_row
    step = 2 * 4 * int(spec.vocab_size) + 4 * int(spec.num_heads) * held
    scale = np.dtype(spec.compute_dtype).itemsize / 4  # the estimate is in float32
    prompt = max(ADMIT_TOKENS, int(slots))
    tokens, gathered = prompt, 0
    if prompt > ADMIT_TOKENS and tokens_split(prefill_bucket(prompt), int(shards)):
        tokens = -(-prompt // int(shards))
        width = (
            int(spec.cache_heads) * int(spec.cache_head_dim) * np.dtype(spec.compute_dtype).itemsize
        )
        gathered = 2 * prefill_bucket(prompt) * width
        # every layer's keys and values of the prompt: spread over the shards when the slots
        # split, else all on the chip whose row it fills
        keys = cache_row_bytes(spec, prefill_bucket(prompt))
        gathered += -(-keys // int(shards)) if split else keys
    admission = int(tokens * activation_bytes_per_token(spec, slots) * scale) + gathered
    return EngineFit(
        rows=int(rows),
        slots=int(slots),
        shards=int(shards),
        cache_bytes=local * per_row,
        temp_bytes=local * step + admission,
        free_bytes=None if free_bytes is None else int(free_bytes),
    )


def engine_rows(
    spec: Any,
    *,
    free_bytes: int | None,
    shards: int,
    slots: int,
    wanted: int,
    explicit: bool = False,
    what: str = "generation",
) -> EngineFit:
    """The engine's rows for `wanted` rows of `slots` slots on devices with `free_bytes` free
    (module docstring). `explicit`: the user asked for `wanted`; it is kept or refused, never cut."""
    shards = max(1, int(shards))
    if not (explicit and slot_splits(shards, int(wanted), int(slots))):
        wanted = max(shards, -(-int(wanted) // shards) * shards)
    fit = engine_fit(spec, rows=wanted, slots=slots, shards=shards, free_bytes=free_bytes)
    if free_bytes is None:
        return fit
    if explicit:
        if fit.total_bytes <= free_bytes:
            return fit
        most = _most_rows(spec, free_bytes, shards, slots, share=1.0)
        hint = (
            f"set gen_batch_size to at most {most} (or leave it unset: the rows are then chosen "
            "from the memory left)"
            if most
            else _no_fit_hint(spec, slots)
        )
        raise JaxevalError(
            f"{what}: gen_batch_size={wanted} needs {fit.text()}", field="gen_batch_size", hint=hint
        )
    rows = wanted
    while fit.total_bytes > ENGINE_SHARE * free_bytes:
        if rows > shards:
            rows = max(shards, (rows // 2) // shards * shards)
        elif fit.total_bytes > free_bytes and slot_splits(shards, rows // 2, slots):
            rows //= 2  # a row a shard does not fit at all: fewer rows, their slots split
        else:
            break
        fit = engine_fit(spec, rows=rows, slots=slots, shards=shards, free_bytes=free_bytes)
    if fit.total_bytes > free_bytes:
        raise JaxevalError(
            f"{what}: even {fit.text()}: no engine of {slots:,} slots fits",
            field="gen_batch_size",
            hint=_no_fit_hint(spec, slots),
        )
    return fit


def _most_rows(spec: Any, free_bytes: int, shards: int, slots: int, *, share: float) -> int:
    """The most rows (a multiple of `shards`, or fewer whose slots split) whose engine fits
    `share` of `free_bytes`; 0: none."""
    one = engine_fit(spec, rows=shards, slots=slots, shards=shards, free_bytes=free_bytes)
    if one.total_bytes > share * free_bytes:
        rows = shards // 2
        while slot_splits(shards, rows, slots):
            fit = engine_fit(spec, rows=rows, slots=slots, shards=shards, free_bytes=free_bytes)
            if fit.total_bytes <= share * free_bytes:
                return rows
            rows //= 2
        return 0
    per_local = max(1, cache_row_bytes(spec, slots) + 8 * int(spec.vocab_size))
    local = 1 + int((share * free_bytes - one.total_bytes) // per_local)
    while local > 1:
        fit = engine_fit(
            spec, rows=local * shards, slots=slots, shards=shards, free_bytes=free_bytes
        )
        if fit.total_bytes <= share * free_bytes:
            break
        local -= 1
    return local * shards


def _no_fit_hint(spec: Any, slots: int) -> str:
    return (
        f"one row of {slots:,} slots per device does not fit: use more devices (a larger slice or "
        "mesh), a smaller dtype (dtype=bfloat16), shorter prompts or max_gen_toks, or fewer "
        "few-shot examples"
    )
