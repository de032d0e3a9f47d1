"""Generation requests -> fixed-shape `GenerateBatch`es (host, numpy), one bucket shape per batch.

A *prompt* is one distinct request with its `copies` (lm-eval `repeats` arrive as the same Instance
repeated; all copies share one prefill). Prompts are grouped by (copies, N bucket, greedy or
sampled: greedy batches compile without the sampling code), sorted longest
first (lm-eval's order), and cut into batches of U prompts. Each batch gets the smallest bucket
shape that fits:

    U  in unique_buckets   (multiples of the batch shards, up to the batch size / copies)
    P  in prompt_bucket    (2**k or 1.5 * 2**k, >= 16: the longest prompt of the batch, left padded)
    N  in new_buckets      (powers of two >= 16: the largest max_gen_toks of the batch)

    batch_size 8, 1 shard, copies 1, prompts of 40, 31, 30, 5 tokens, max_gen_toks 32 ->
        one batch of shape U=4, P=64, N=32 (U=8 with shrink_last=False)

Rows of the batch are `u * copies + j`; padding prompts have no valid token and `max_new = 0`.
Every request index appears in exactly one row (`rows` maps rows back), checked by the caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxeval.kernels.generate import GenerateBatch
from jaxeval.lm.generate.kwargs import GenSettings
from jaxeval.lm.generate.stops import STOP_BYTES, STOP_STRINGS, STOP_TOKENS, StopRows
from jaxeval.platform.distributed import fingerprint
from jaxeval.shapes import pow2_at_least

MIN_BUCKET = 16


def prompt_bucket(n: int) -> int:
    """Smallest of 16, 32, 48, 64, 96, 128, 192, 256, 384, ... (2**k and 1.5 * 2**k) >= n.

    Decode steps read the whole cache (P + N slots) per token, so the prompt buckets are finer
    than powers of two: at most a third of the prompt slots are padding.
    """
    p = pow2_at_least(n, MIN_BUCKET)
    three_quarters = 3 * p // 4
    return three_quarters if three_quarters >= max(n, MIN_BUCKET) and p > 32 else p


def prefill_bucket(n: int) -> int:
    """`prompt_bucket` up to 256, then four widths per octave (320, 384, 448, 512, 640, ...) >= n.

    The continuous engine's prefill widths (`schedule.admission_chunks`): a prefill computes
    every padded token, so long prompts pad by less than a quarter octave (1,233 -> 1,280, where
    `prompt_bucket` gives 1,536). Never above `prompt_bucket(n)`, so a suffix fits the slots that
    `engine_shape` reserves.
    """
    if n <= 256:
        return prompt_bucket(n)
    step = pow2_at_least(n) // 8  # 2**k < n <= 2**(k+1): steps of 2**(k-2)
    return -(-int(n) // step) * step


@dataclasses.dataclass(frozen=True)
class Prompt:
    """One distinct request: its (truncated) prompt tokens, settings and output rows."""

    tokens: tuple[int, ...]
    settings: GenSettings
    stops: StopRows
    request_index: int  # index among distinct requests (the sampling key)
    outputs: tuple[int, ...]  # positions in the caller's request list, one per copy

    @property
    def copies(self) -> int:
        return len(self.outputs)

    @property
    def max_new(self) -> int:
        cap = self.stops.max_new_cap
        return min(self.settings.max_gen_toks, cap) if cap else self.settings.max_gen_toks


@dataclasses.dataclass(frozen=True)
class GenShape:
    unique: int  # U
    prompt: int  # P
    new: int  # N
    copies: int
    sample: bool  # False: every row greedy (argmax-only kernel)

    @property
    def rows(self) -> int:
        return self.unique * self.copies


@dataclasses.dataclass(frozen=True)
class PlannedGenBatch:
    shape: GenShape
    batch: GenerateBatch  # numpy arrays
    rows: np.ndarray  # int64[B]: caller's request position per row, -1 = padding


def unique_bucket(n: int, max_unique: int, shards: int) -> int:
    """Smallest shards * 2**k >= n, capped at max_unique (itself a multiple of shards)."""
    u = shards
    while u < n and u < max_unique:
        u *= 2
    return min(u, max_unique)


def max_unique_for(batch_size: int, copies: int, shards: int) -> int:
    per = max(1, batch_size // copies)
    return max(shards, -(-per // shards) * shards)


def plan_gen_batches(
    prompts: Sequence[Prompt], *, batch_size: int, shards: int, shrink_last: bool = True
) -> list[PlannedGenBatch]:
    """Groups, sorts and pads the prompts into bucketed batches (module docstring).

    `shrink_last=False` pads every batch to the full U, so only P and N vary (fewer compilations).
    """
    groups: dict[tuple[int, int, bool], list[Prompt]] = {}
    for pr in prompts:
        key = (pr.copies, pow2_at_least(pr.max_new, MIN_BUCKET), pr.settings.do_sample)
        groups.setdefault(key, []).append(pr)
    out = []
    for (copies, n_new, sample), group in sorted(groups.items()):
        group.sort(key=lambda pr: (-len(pr.tokens), pr.request_index))
        max_u = max_unique_for(batch_size, copies, shards)
        for start in range(0, len(group), max_u):
            chunk = group[start : start + max_u]
            shape = GenShape(
                unique=unique_bucket(len(chunk), max_u, shards) if shrink_last else max_u,
                prompt=prompt_bucket(max(len(pr.tokens) for pr in chunk)),
                new=n_new,
                copies=copies,
                sample=sample,
            )
            out.append(_fill(chunk, shape))
    return out


def gen_plan_digest(plan: Sequence[PlannedGenBatch]) -> bytes:
    """Digest of every batch's shape, arrays and row map (processes must agree on it)."""
    arrays = [np.asarray([len(plan)])]
    for pb in plan:
        s = pb.shape
        arrays += [np.asarray([s.unique, s.prompt, s.new, s.copies, s.sample]), *pb.batch, pb.rows]
    return fingerprint(arrays)


def row_settings(n: int) -> dict[str, np.ndarray]:
    """[n] rows of per-row generation settings with nothing to do: budget 0, greedy, no stops
    (the fields `GenerateBatch` and the continuous engine's `RowSettings` share)."""
    return {
        "key_ids": np.zeros((n, 2), np.int32),  # (request index, repeat index)
        "max_new": np.zeros(n, np.int32),
        "greedy": np.ones(n, bool),
        "temperature": np.zeros(n, np.float32),
        "top_k": np.zeros(n, np.int32),
        "top_p": np.ones(n, np.float32),
        "stop_ids": np.full((n, STOP_TOKENS), -1, np.int32),
        "stops": np.full((n, STOP_STRINGS, STOP_BYTES), -2, np.int32),
    }


def set_row(settings: dict[str, np.ndarray], row: int, prompt: Prompt, copy: int) -> None:
    """Row `row` of `row_settings` arrays <- copy `copy` of `prompt`."""
    s = prompt.settings
    settings["key_ids"][row] = (prompt.request_index, copy)
    settings["max_new"][row] = prompt.max_new
    settings["greedy"][row] = s.greedy
    settings["temperature"][row] = s.temperature
    settings["top_k"][row] = s.top_k
    settings["top_p"][row] = s.top_p
    settings["stop_ids"][row] = prompt.stops.stop_ids
    settings["stops"][row] = prompt.stops.stops


def _fill(chunk: Sequence[Prompt], shape: GenShape) -> PlannedGenBatch:
    u, p, b, c = shape.unique, shape.prompt, shape.rows, shape.copies
    tokens = np.zeros((u, p), np.int32)
    valid = np.zeros((u, p), bool)
    settings = row_settings(b)
    rows = np.full(b, -1, np.int64)
    for i, pr in enumerate(chunk):
        n = len(pr.tokens)
        tokens[i, p - n :] = pr.tokens
        valid[i, p - n :] = True
        for j, pos in enumerate(pr.outputs):
            rows[i * c + j] = pos
            set_row(settings, i * c + j, pr, j)
    batch = GenerateBatch(tokens=tokens, valid=valid, **settings)
    return PlannedGenBatch(shape=shape, batch=batch, rows=rows)


def request_pairs(requests: Sequence[Any]) -> tuple[list[tuple[str, dict]], list[int]]:
    """lm-eval Instances (or (context, gen_kwargs) tuples) -> pairs, and each one's first copy.

    The evaluator expands `repeats` by listing the same Instance object consecutively; those rows
    share a prompt (one prefill) and differ only in their repeat index.
    """
    pairs, same, first = [], [], {}
    for i, req in enumerate(requests):
        args = req.args if hasattr(req, "args") else tuple(req)
        context, gen_kwargs = args[0], (args[1] if len(args) > 1 else {})
        pairs.append((context, dict(gen_kwargs or {})))
        key = id(req) if hasattr(req, "args") else None
        if key is not None and key in first:
            same.append(first[key])
        else:
            if key is not None:
                first[key] = i
            same.append(i)
    return pairs, same
