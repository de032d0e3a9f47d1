"""Continuous batching on the host: a queue of prompts, B engine rows, refills between decode chunks.

    rows = run_continuous(gen, prompts, on_rows=...)  -> {request position: (token ids, end reason)}

1. **Shared prefixes** (`shared_prefixes`): prompts are sorted by their token ids and neighbours
   whose common prefix is at least `MIN_PREFIX` tokens form a group (GSM8K's few-shot block with
   `sampler: first_n`, a description or system prompt). Each group's prefix is prefilled once
   (`kernels.continuous.prefill_prefix`); its prompts prefill only their suffix and copy the prefix's
   keys/values into their row (the copy is measured against the recomputation it replaces in
   docs/performance.md). A prompt keeps at least one token of its own (its last logits).

       prompts  [a b c d e f]  [a b c d x]  [a b c y z w]  [q r]      MIN_PREFIX 3
       groups   prefix [a b c] (3 tokens) for the first three; [q r] alone (no prefix)

2. **Admission**: the queue holds every copy of every prompt, ordered by prefix group, then longest
   expected output (`max_new`) first, then longest prompt (lm-eval's order), then request index.
   Free rows take the queue's head; one `admit` call prefills the distinct prompts among the admitted
   copies once (U prompts -> R rows, both powers of two, suffixes padded to a `prefill_bucket`),
   in calls of at most ADMIT_TOKENS padded tokens (`schedule.admission_chunks`).
3. **Decode chunks** run until every row is done or enough rows are free to refill
   (`refill_rows`, or every remaining request when fewer are queued); the host reads the finished
   rows, frees them and admits the next prompts.
4. **The tail**: once the queue is empty, a chunk also returns when at most `tail_threshold` rows
   are live, and the host moves them into an engine of `tail_rows` rows (B/2, B/4, ...: a decode
   step reads every row's cache, live or not), until the last row ends:

       B = 8, rows ending at steps 20, 27, 36, 50, 57, 88 (+ 2 that ended at once):
       steps 0-27 in 8 rows, 27-50 in 4, 50-57 in 2, 57-88 in 1

Compiled shapes: per engine (B rows, C slots, N new tokens, sampled or not) a decode chunk and a
host read, for B and each tail size, plus a move between consecutive sizes; one `prefill_prefix`
per prefix bucket, one `admit` per (U, R, prefix bucket, suffix bucket): a finite set fixed by the
buckets, each compiled once by the Generator's `Executables` (`Generator.compile_count`). The
decode chunks, reads and moves are queued at the start on its background compile thread
(`ContinuousEngine.compile_ahead`), so they compile while the main thread compiles and runs the
admissions.

The queue, the rows and the moves are `schedule.Schedule`'s (pure Python); its rounds of typed
calls (`calls.engine_rounds`: `Init`, `Prefix`, `Admit`, `Decode`, `Peek`, `Shrink`, each the key
of its executable) are what this module runs on the device and what a dry run counts
(`jaxeval.lm.dry_run`, for `jaxeval plan`); `engine_job(target, key)` builds any key's job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from jaxeval.kernels.continuous import (
    AdmitBatch,
    EngineState,
    RowSettings,
    admit,
    cache_split,
    decode_chunk,
    init_state,
    prefill_prefix,
    row_dims,
    select_rows,
)
from jaxeval.kernels.generate import StopTable
from jaxeval.lm.executables import Executables, Job
from jaxeval.lm.generate.calls import (
    Admit,
    AdmitStep,
    Decode,
    EngineKey,
    EngineShape,
    Init,
    Peek,
    Prefix,
    PrefixStep,
    ShrinkStep,
    engine_rounds,
    init_of,
    peek_of,
    shrink_of,
)
from jaxeval.lm.generate.plan import (
    Prompt,
    prefill_bucket,
    row_settings,
    set_row,
)
from jaxeval.lm.generate.schedule import Call, Item, Schedule, tail_threshold
from jaxeval.lm.generate.shape import engine_plan
from jaxeval.lm.generate.sizing import free_bytes_per_device
from jaxeval.lm.generate.stops import STOP_BYTES, STOP_STRINGS, STOP_TOKENS
from jaxeval.models.contract import KVCache
from jaxeval.models.runtime import Runtime
from jaxeval.platform import distributed
from jaxeval.platform.distributed import fingerprint
from jaxeval.platform.mesh import batch_sharding, call_args, put_global, replicated, to_host
from jaxeval.shapes import pow2_at_least


def _dtype(x: Any) -> Any:
    return x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype


def _settings(items: Sequence[Item], r: int) -> RowSettings:
    """[R] row settings for the admitted copies (padding rows: budget 0)."""
    settings = row_settings(r)
    for k, it in enumerate(items):
        set_row(settings, k, it.prompt, it.copy)
    return RowSettings(**settings)


def _admit_batch(call: Call, rows: int) -> AdmitBatch:
    """The host arrays of one `admit` call (`schedule.Call`) into an engine of `rows` rows: U
    suffixes padded to the call's width, each admitted row's engine row (`rows` on padding
    entries: dropped) and prompt, and the rows' settings."""
    prompts, start = call.prompts, call.start
    tokens = np.zeros((call.u, call.width), np.int32)
    valid = np.zeros((call.u, call.width), bool)
    for k, p in enumerate(prompts):
        suffix = p.tokens[start:]
        tokens[k, : len(suffix)] = suffix
        valid[k, : len(suffix)] = True
    dst = np.full(call.r, rows, np.int32)
    src = np.zeros(call.r, np.int32)
    dst[: len(call.rows)] = call.rows
    src[: len(call.items)] = call.src
    return AdmitBatch(tokens, valid, np.int32(start), dst, src, _settings(call.items, call.r))


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class EngineTarget:
    """What continuous batching runs on: the model (`spec`), how it runs (`runtime`, whose mesh
    the state lives on), its parameters, the stop table and the compile boundary. A `Generator`
    hands over its own (`Generator.engine_target`); a planner builds one of abstract parameters on
    another machine's mesh and reads the engine's `jobs` without running anything."""

    spec: Any  # a `DecoderModel`
    runtime: Runtime
    params: Any
    stop_table: StopTable
    executables: Executables

    def __post_init__(self):
        if self.runtime.mesh is None:
            raise ValueError("EngineTarget: the runtime has no mesh")

    @property
    def mesh(self) -> Mesh:
        return self.runtime.mesh

    @property
    def replicated(self) -> Any:
        return replicated(self.runtime.mesh)


def prefix_job(target: EngineTarget, width: int) -> Job:
    """`prefill_prefix` of a shared prefix padded to `width` tokens (a `prefill_bucket`): one
    row, replicated, shared by every engine shape on `target`."""
    spec, runtime, full = target.spec, target.runtime, target.replicated
    tokens = jax.ShapeDtypeStruct((width,), np.int32, sharding=full)
    valid = jax.ShapeDtypeStruct((width,), np.bool_, sharding=full)
    return Job(
        Prefix(width),
        lambda p, t, v: prefill_prefix(p, t, v, model=spec, runtime=runtime),
        (target.params, tokens, valid),
        in_shardings=(jax.tree.map(lambda x: x.sharding, target.params), full, full),
        out_shardings=full,
    )


def engine_job(target: EngineTarget, key: EngineKey) -> Job:
    """The job of the engine call `key` on `target` (what `jaxeval plan` compiles for a key the
    run's rounds published): a prefix needs no engine, every other call its key's engine."""
    if isinstance(key, Prefix):
        return prefix_job(target, key.width)
    shape = key.shape
    engine = ContinuousEngine(
        target, rows=shape.rows, slots=shape.slots, n_new=shape.n_new, sample=shape.sample
    )
    return engine.job(key)


def abstract_admission(admitted: int, rows: int, width: int, sharding: Any) -> AdmitBatch:
    """An `AdmitBatch` of `admitted` prompts of `width` tokens into `rows` rows, as
    `jax.ShapeDtypeStruct`s with `sharding` (what an `admit` call's executable is compiled for)."""

    def arr(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    settings = RowSettings(
        key_ids=arr((rows, 2), np.int32),
        max_new=arr((rows,), np.int32),
        greedy=arr((rows,), np.bool_),
        temperature=arr((rows,), np.float32),
        top_k=arr((rows,), np.int32),
        top_p=arr((rows,), np.float32),
        stop_ids=arr((rows, STOP_TOKENS), np.int32),
        stops=arr((rows, STOP_STRINGS, STOP_BYTES), np.int32),
    )
    return AdmitBatch(
        tokens=arr((admitted, width), np.int32),
        valid=arr((admitted, width), np.bool_),
        start=arr((), np.int32),
        dst=arr((rows,), np.int32),
        src=arr((rows,), np.int32),
        settings=settings,
    )


class ContinuousEngine:
    """The compiled pieces for one engine shape (B rows, C slots, N new tokens, sampled or not) on
    one `EngineTarget`. Each piece is a public `Job` (`init_job`, `prefix_job`, `admit_job`,
    `decode_job`, `peek_job`, `shrink_job`; `jobs` lists what a run of the engine compiles), so
    the planner compiles exactly what a run would."""

    def __init__(self, target: EngineTarget, *, rows: int, slots: int, n_new: int, sample: bool):
        self.target = target
        self.rows, self.slots, self.n_new, self.sample = rows, slots, n_new, sample
        mesh = target.mesh
        self.replicated = target.replicated
        buffer = int(target.stop_table.bytes.shape[1])
        spec = target.spec  # not the target (its parameters): the job's fingerprint reads this
        self._make = lambda: init_state(
            spec,
            rows=rows,
            slots=slots,
            n_new=n_new,
            stop_shape=(STOP_TOKENS, STOP_STRINGS, STOP_BYTES),
            buffer=buffer,
        )
        abstract = jax.eval_shape(self._make)
        dims = jax.tree.leaves(row_dims(abstract), is_leaf=lambda d: d is None)
        leaves, tree = jax.tree.flatten(abstract)
        self.state_shardings = jax.tree.unflatten(
            tree,
            [
                self.replicated if d is None else batch_sharding(mesh, x.shape, d)
                for x, d in zip(leaves, dims)
            ],
        )
        # fewer rows than batch devices: each row's slots split over them (`attention.slots`)
        self.split = cache_split(abstract.cache, target.runtime)
        if self.split is not None:
            k_s, v_s, flags = self.split.shardings(abstract.cache.k.shape[2])
            cache = KVCache(k=k_s, v=v_s, valid=flags, positions=flags)
            self.state_shardings = self.state_shardings._replace(cache=cache)
        self.abstract = jax.tree.map(
            lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
            abstract,
            self.state_shardings,
        )
        self.param_shardings = jax.tree.map(lambda x: x.sharding, target.params)
        self.stop_shardings = StopTable(self.replicated, self.replicated)
        self._jobs: dict[EngineKey, Job] = {}  # built once per key: a run admits hundreds of times

    def _compile(self, job: Job) -> Callable:
        """The executable for `job.key`: compiled before, compiled ahead (waited for), or now."""
        return self.target.executables.get(job)

    def _ahead(self, jobs: Sequence[Job]) -> None:
        """Queues the jobs' compilation on the target's background compile thread."""
        self.target.executables.ahead(jobs)

    def _abstract(self, tree: Any) -> Any:
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(np.shape(x), _dtype(x), sharding=self.replicated),
            tree,
        )

    # ---- the executables, as jobs ---------------------------------------------------------
    @property
    def shape(self) -> EngineShape:
        return EngineShape(self.rows, self.slots, self.n_new, self.sample)

    def job(self, key: EngineKey) -> Job:
        """The job of any of this engine's calls (`calls`: the key says which; a `Shrink` builds
        the smaller engine it moves into)."""
        if isinstance(key, Init):
            return self.init_job()
        if isinstance(key, Prefix):
            return self.prefix_job(key.width)
        if isinstance(key, Admit):
            return self.admit_job(key.admitted, key.admit_rows, key.prefix_width, key.width)
        if isinstance(key, Decode):
            return self.decode_job(key.steps_per_iteration)
        if isinstance(key, Peek):
            return self.peek_job()
        small = ContinuousEngine(
            self.target, rows=key.target, slots=self.slots, n_new=self.n_new, sample=self.sample
        )
        return self.shrink_job(small)

    def init_job(self) -> Job:
        return Job(init_of(self.shape), self._make, (), out_shardings=self.state_shardings)

    def prefix_job(self, width: int) -> Job:
        return prefix_job(self.target, width)

    def admit_job(self, admitted: int, rows: int, prefix_width: int, width: int) -> Job:
        """`admit` of `admitted` distinct prompts (suffixes padded to `width` tokens) into `rows`
        engine rows, after a prefix cache of `prefix_width` slots (0: no prefix)."""
        key = Admit(self.shape, admitted, rows, prefix_width, width)
        if key in self._jobs:
            return self._jobs[key]
        spec, runtime, sample = self.target.spec, self.target.runtime, self.sample

        def kernel(pa, st, s, pf, b, sd):
            return admit(pa, st, s, pf, b, sd, model=spec, runtime=runtime, sample=sample)

        prefix = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self.replicated),
            jax.eval_shape(lambda: spec.init_cache(1, prefix_width)),
        )
        batch = abstract_admission(admitted, rows, width, self.replicated)
        seed = jax.ShapeDtypeStruct((), np.int32, sharding=self.replicated)
        self._jobs[key] = self._state_job(key, kernel, prefix, batch, seed)
        return self._jobs[key]

    def decode_job(self, steps_per_iteration: int = 1) -> Job:
        """`decode_chunk`; `steps_per_iteration` > 1 only for counting one step's cost."""
        key = Decode(self.shape, steps_per_iteration)
        if key in self._jobs:
            return self._jobs[key]
        spec, runtime, sample = self.target.spec, self.target.runtime, self.sample

        def kernel(pa, st, s, sd, w):
            return decode_chunk(
                pa, st, s, sd, w, model=spec, runtime=runtime, sample=sample,
                steps_per_iteration=steps_per_iteration,
            )  # fmt: skip

        scalar = jax.ShapeDtypeStruct((), np.int32, sharding=self.replicated)
        self._jobs[key] = self._state_job(key, kernel, scalar, scalar)
        return self._jobs[key]

    def shrink_job(self, small: ContinuousEngine) -> Job:
        """The move of this engine's state into `small`'s rows (`select_rows`)."""
        runtime = self.target.runtime
        return Job(
            shrink_of(self.shape, small.rows),
            lambda s, k: select_rows(s, k, runtime=runtime),
            (self.abstract, *self._abstract((np.zeros(small.rows, np.int32),))),
            in_shardings=(self.state_shardings, self.replicated),
            out_shardings=small.state_shardings,
        )

    def peek_job(self) -> Job:
        return Job(
            peek_of(self.shape),
            lambda s: (s.done, s.length, s.reason, s.out, s.steps),
            (self.abstract,),
            in_shardings=(self.state_shardings,),
            out_shardings=self.replicated,
        )

    def jobs(self, *, admitted: int, width: int, prefix_width: int = 0) -> list[Job]:
        """What a run of this engine compiles for admissions of `admitted` prompts of `width`
        tokens (after a prefix of `prefix_width` slots): the state's creation, the admission,
        the decode chunk and the host read."""
        rows = pow2_at_least(admitted, 1)
        admit_job = self.admit_job(admitted, rows, prefix_width, width)
        return [self.init_job(), admit_job, self.decode_job(), self.peek_job()]

    # ---- running them ----------------------------------------------------------------------
    def new_state(self) -> EngineState:
        return self._compile(self.init_job())()

    def prefix(self, tokens: Sequence[int]) -> Any:
        """The prefix cache (1 row, prefill_bucket(S) slots; none: 0 slots)."""
        if not tokens:
            return jax.device_put(self.target.spec.init_cache(1, 0), self.replicated)
        width = prefill_bucket(len(tokens))
        ids = np.zeros(width, np.int32)
        ids[: len(tokens)] = tokens
        valid = np.arange(width) < len(tokens)
        fn = self._compile(self.prefix_job(width))
        return fn(self.target.params, *put_global((ids, valid), self.replicated))

    def _state_job(self, key: EngineKey, kernel: Callable, *extras: Any) -> Job:
        """kernel(params, stop_table, state, *extras) -> state: the state keeps its row shardings
        and is donated (the cache stays in place); extras (abstract) are replicated."""
        args = (self.target.params, self.target.stop_table, self.abstract, *extras)
        return Job(
            key,
            kernel,
            args,
            in_shardings=(
                self.param_shardings,
                self.stop_shardings,
                self.state_shardings,
                *[self.replicated] * len(extras),
            ),
            out_shardings=self.state_shardings,
            donate_argnums=(2,),
        )

    def _state_call(self, job: Job, state: EngineState, *extras: Any) -> EngineState:
        return self._compile(job)(self.target.params, self.target.stop_table, state, *extras)

    def admit(
        self, key: Admit, state: EngineState, prefix: Any, batch: AdmitBatch, seed: Any
    ) -> EngineState:
        """The `admit` call `key` of `batch` (its host arrays, of the key's shapes)."""
        if key.engine != self.shape or batch.tokens.shape != (key.admitted, key.width):
            raise AssertionError(f"admission {key} on the engine {self.shape}")
        job = self.admit_job(key.admitted, key.admit_rows, key.prefix_width, key.width)
        return self._state_call(job, state, prefix, call_args(batch, self.replicated), seed)

    def decode(self, state: EngineState, seed: Any, want: int) -> EngineState:
        want = call_args(np.int32(want), self.replicated)
        return self._state_call(self.decode_job(), state, seed, want)

    def shrink(self, state: EngineState, small: ContinuousEngine, keep: np.ndarray) -> EngineState:
        """Rows `keep` of this engine's state as `small`'s state (`kernels.continuous.select_rows`)."""
        return self._compile(self.shrink_job(small))(state, put_global(keep, self.replicated))

    def peek(self, state: EngineState) -> tuple[np.ndarray, ...]:
        """(done, length, reason, out, steps) on the host, replicated first (multi-process safe)."""
        return to_host(self._compile(self.peek_job())(state))

    def compile_ahead(self, seed: Any, smaller: Sequence[ContinuousEngine]) -> None:
        """Queues this engine's decode chunk and host read, then each smaller (tail) engine's and
        the move into it, on the background compile thread: they compile while the main thread
        compiles and runs the admissions (two cores, one compile each)."""
        chain = [self, *smaller]
        jobs = []
        for big, engine in zip([None, *chain], chain):
            jobs += [engine.decode_job(), engine.peek_job()]
            if big is not None:
                jobs.append(big.shrink_job(engine))
        self._ahead(jobs)


def run_continuous(
    gen: Any,
    prompts: Sequence[Prompt],
    *,
    on_rows: Callable[[list[tuple[int, list[int], int]]], None] | None = None,
) -> tuple[dict[int, tuple[list[int], int]], dict[str, float]]:
    """Every copy of every prompt through the engine: (request position -> (tokens, end reason),
    stats). `on_rows([(position, tokens, reason)])` is called as rows finish. The settings are
    `gen.config`'s (`GenConfig`: `min_prefix`, `refill_rows`, `admission`, and `tail`: once the
    queue is empty, decode the live rows in smaller engines, `tail_rows`)."""
    config = gen.config
    target = gen.engine_target
    groups, shape = engine_plan(
        prompts,
        config,
        spec=target.spec,
        shards=gen.shards,
        free_bytes=free_bytes_per_device(target.mesh),
    )
    rows, slots, n_new, sample = shape.rows, shape.slots, shape.n_new, shape.sample
    tail = config.tail
    engine = ContinuousEngine(target, rows=rows, slots=slots, n_new=n_new, sample=sample)
    shards = gen.shards
    tails: dict[int, ContinuousEngine] = {}  # the smaller engines the tail may move into
    size = tail_threshold(rows, shards) if tail else 0
    while size:
        tails[size] = ContinuousEngine(target, rows=size, slots=slots, n_new=n_new, sample=sample)
        size = tail_threshold(size, shards)
    schedule = Schedule(prompts, groups, rows=rows, shards=shards, config=config)
    if jax.process_count() > 1:
        order = [np.asarray([it.prompt.request_index, it.copy, it.start]) for it in schedule.items]
        distributed.check_same("generation queue", fingerprint([rows, slots, n_new, *order]))

    seed = put_global(np.int32(config.seed), gen.replicated)
    engine.compile_ahead(seed, list(tails.values()))
    try:
        state = engine.new_state()
        prefixes: dict[int, Any] = {}
        out: dict[int, tuple[list[int], int]] = {}
        stats = {
            "admissions": 0,
            "prompt_tokens": 0,
            "prefill_tokens": 0,
            "prefix_tokens": 0,
            "tail_moves": 0,
        }
        steps = 0
        engines = {engine.rows: engine, **tails}
        done = np.zeros(0, bool)
        for round_ in engine_rounds(schedule, engine.shape):
            for step in round_.steps:
                if isinstance(step, PrefixStep):
                    admission = step.admission
                    prefixes[admission.group] = engine.prefix(admission.prefix)
                    stats["prefill_tokens"] += len(admission.prefix)
                    stats["prefix_tokens"] += len(admission.prefix)
                elif isinstance(step, AdmitStep):
                    batch = _admit_batch(step.call, engine.rows)
                    prefix = prefixes[step.admission.group]
                    state = engine.admit(step.key, state, prefix, batch, seed)
                    stats["prefill_tokens"] += int(batch.valid.sum())
                    stats["prompt_tokens"] += sum(len(p.tokens) for p in step.call.prompts)
                    stats["admissions"] += 1
                elif isinstance(step, ShrinkStep):  # the tail: the live rows into a smaller engine
                    small = engines[step.key.target]
                    state = engine.shrink(state, small, np.asarray(step.keep, np.int32))
                    engine = small
                    stats["tail_moves"] += 1
                else:
                    state = engine.decode(state, seed, step.want)
                    done, length, reason, toks, steps = engine.peek(state)
            finished = []
            for row, it in schedule.finish(np.flatnonzero(done).tolist()):
                pos = it.prompt.outputs[it.copy]
                if pos in out:
                    raise AssertionError(f"request {pos} answered twice")
                out[pos] = (toks[row, : length[row]].tolist(), int(reason[row]))
                finished.append((pos, out[pos][0], out[pos][1]))
            if finished and on_rows is not None:
                on_rows(finished)
    finally:  # what the background thread has not started is not needed after all
        gen.executables.cancel_pending()
    stats["decode_steps"] = int(steps)
    stats["engine_rows"], stats["engine_slots"], stats["engine_new"] = rows, slots, n_new
    return out, stats
