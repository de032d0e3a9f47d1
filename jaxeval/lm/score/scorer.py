"""The one sharding boundary of loglikelihood scoring: compiled `score` executables per bucket.

    scorer = Scorer(model=spec, params=params, mesh=mesh, runtime=runtime, buckets=buckets)
    jobs = scorer.jobs(buckets)                     # what it compiles: one `Job` per bucket
    for answers in scorer.run_plan(plan):           # one BatchAnswers per batch, as it finishes
        answers.indices, answers.loglik, answers.greedy   # int[n], float32[n], bool[n]
    loglik, greedy = answer_arrays(scorer.run_plan(plan), plan.n_requests)  # float32[R], bool[R]

Batches are sharded over the mesh's batch axes (`data`, and `fsdp` when present); parameters keep
the shardings they were loaded with; the outputs are small and replicated. Each batch shape is
compiled ahead of time once, when a plan first uses it, by the scorer's `Executables`
(`jaxeval.lm.executables`, the compile boundary): `run_plan` hands the plan's shapes to its
background compile thread in first-use order and runs each batch as soon as its executable is ready,
so later shapes compile while earlier batches run. Shapes a plan never uses are never compiled
(`warmup()` still compiles the whole grid on request). With JAX's persistent cache on
(`jaxeval.platform.compile_cache`), a known shape loads from disk instead; `compile_stats` counts both.

Parameters may be abstract (`jax.ShapeDtypeStruct`s with their `NamedSharding`s, on any mesh): the
scorer then compiles (`warmup`, `executables.describe`) but cannot run.

On a mesh spanning several processes every process runs the same plan: it checks that its plan's
digest matches the other processes', places its own shards of each batch (`mesh.put_global`) and
reads the replicated outputs (`mesh.to_host`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from jaxeval.kernels.score import ScoreBatch, fast_vocab_chunk, score
from jaxeval.lm.executables import Executables, Job
from jaxeval.lm.score.buckets import Bucket, BucketSet, row_multiple_at
from jaxeval.lm.score.planner import PlannedScoreBatch, ScorePlan
from jaxeval.models.contract import DecoderModel
from jaxeval.models.runtime import Runtime
from jaxeval.platform import distributed
from jaxeval.platform.mesh import (
    batch_sharding,
    batch_shards,
    place_params,
    put_global,
    replicated,
    to_host,
)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class BatchAnswers:
    """One scored batch's answers, n of them (its used slots), as `run_plan` yields them.

    indices      = [4, 0, 7]              request indices, int[n]
    loglik       = [-3.2, -0.5, -11.0]    float32[n]   (NaN where the batch did not run)
    greedy       = [False, True, False]   bool[n]
    real_tokens  = 96                     non-padding tokens scored (0: not run)
    dispatched_at = 1042.7                time.perf_counter() when handed to the device
                                          (None: not run, its answers are the caller's)
    """

    indices: np.ndarray
    loglik: np.ndarray
    greedy: np.ndarray
    real_tokens: int
    dispatched_at: float | None

    @property
    def ran(self) -> bool:
        return self.dispatched_at is not None


def not_run(indices: np.ndarray) -> BatchAnswers:
    """The `BatchAnswers` of a batch left out by `run_plan(skip=...)`: NaN / False, no tokens."""
    n = indices.size
    return BatchAnswers(
        indices=indices,
        loglik=np.full(n, np.nan, np.float32),
        greedy=np.zeros(n, bool),
        real_tokens=0,
        dispatched_at=None,
    )


def answer_arrays(
    batches: Iterable[BatchAnswers], n_requests: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every batch's answers in request order: (loglik float32[R], greedy bool[R]).

    batches = [indices [2, 0], loglik [-1.5, -0.25]], [indices [1], loglik [-4.0]]
    -> loglik [-0.25, -4.0, -1.5]
    """
    loglik = np.full(n_requests, np.nan, np.float32)
    greedy = np.zeros(n_requests, bool)
    for answers in batches:
        loglik[answers.indices] = answers.loglik
        greedy[answers.indices] = answers.greedy
    return loglik, greedy


def skipped(batch: Any, skip: Callable[[np.ndarray], bool]) -> bool:
    """Whether `run_plan(skip=skip)` leaves `batch` out: it answers requests, all of them `skip`."""
    idx = batch.slot_request[batch.slot_request >= 0]
    return bool(idx.size) and bool(skip(idx))


def score_plan_digest(plan: ScorePlan) -> bytes:
    """Digest of every batch's bucket, arrays and slot map (equal on processes with equal plans)."""
    arrays = [np.asarray([plan.n_requests, len(plan.batches)])]
    for pb in plan.batches:
        b = pb.bucket
        arrays += [np.asarray([b.rows, b.length, b.points, b.slots]), *pb.batch, pb.slot_request]
    return distributed.fingerprint(arrays)


class Scorer:
    """Compiled scoring for one model on one mesh and one bucket set."""

    def __init__(
        self,
        *,
        model: DecoderModel,
        params: Any,
        mesh: Mesh,
        buckets: BucketSet,
        runtime: Runtime | None = None,
        vocab_chunk: int | None = None,
    ):
        """`runtime` is how the model runs on `mesh` (None: the reference backends on it)."""
        if runtime is None:
            runtime = Runtime(mesh=mesh)
        elif runtime.mesh != mesh:
            raise ValueError("Scorer: the runtime's mesh is not the scorer's mesh")
        self.model = model
        self.runtime = runtime
        self.mesh = mesh
        self.buckets = buckets
        self.params = place_params(params, mesh)
        self.vocab_chunk = vocab_chunk
        shards = batch_shards(mesh)
        self.replicated = replicated(mesh)
        for b in buckets:  # rows divide over the batch axes, or split their tokens over them
            if b.rows % row_multiple_at(b.length, shards):
                raise ValueError(
                    f"bucket {b} has {b.rows} rows, not a multiple of the {shards} batch shards"
                )
        self.executables = Executables("jaxeval-score-compile", store=True)
        self.vocab_size = jax.eval_shape(model.head_weight, self.params).shape[0]

    @property
    def compile_count(self) -> int:
        return self.executables.compile_count

    def chunk_for(self, bucket: Bucket) -> int:
        return self.vocab_chunk or fast_vocab_chunk(bucket.rows * bucket.points, self.vocab_size)

    def batch_sharding(self, bucket: Bucket) -> Any:
        """The bucket's batch arrays: rows over the batch axes, or replicated when they do not
        divide (rows that split their tokens over the devices inside the kernel instead)."""
        return batch_sharding(self.mesh, (bucket.rows, 1))

    def abstract_batch(self, bucket: Bucket) -> ScoreBatch:
        sharding = self.batch_sharding(bucket)

        def arr(width):
            return jax.ShapeDtypeStruct((bucket.rows, width), np.int32, sharding=sharding)

        t, k = bucket.length, bucket.points
        return ScoreBatch(arr(t), arr(t), arr(t), arr(t), arr(k), arr(k), arr(k))

    def kernel(self, bucket: Bucket) -> Callable:
        """`score` with the bucket's static config bound: (params, ScoreBatch) -> ScoreResult."""
        return functools.partial(
            score,
            model=self.model,
            runtime=self.runtime,
            n_slots=bucket.slots,
            vocab_chunk=self.chunk_for(bucket),
        )

    def job(self, bucket: Bucket) -> Job:
        """The bucket's executable: `kernel(bucket)` at the sharding boundary (parameters keep
        their shardings, batches split over the batch axes, outputs replicated)."""
        params_sharding = jax.tree.map(lambda x: x.sharding, self.params)
        batch_shardings = ScoreBatch(*([self.batch_sharding(bucket)] * len(ScoreBatch._fields)))
        return Job(
            bucket,
            self.kernel(bucket),
            (self.params, self.abstract_batch(bucket)),
            in_shardings=(params_sharding, batch_shardings),
            out_shardings=self.replicated,
        )

    def jobs(self, buckets: Iterable[Bucket]) -> list[Job]:
        """The executables scoring `buckets` would compile, one `Job` per bucket (the planner
        compiles these for another machine's mesh)."""
        return [self.job(b) for b in buckets]

    def lower(self, bucket: Bucket) -> Any:
        """The bucket's executable lowered (StableHLO), not compiled."""
        return self.job(bucket).lower()

    def compile_async(self, buckets: Iterable[Bucket]) -> None:
        """Queues every not yet compiled bucket on the background compile thread, in order."""
        self.executables.ahead(self.job(b) for b in buckets if b not in self.executables)

    def compiled(self, bucket: Bucket) -> Callable:
        """The executable for `bucket`, compiling it (or waiting for the compile thread) if needed."""
        exe = self.executables
        return exe.compiled(bucket) if bucket in exe else exe.get(self.job(bucket))

    def warmup(self, buckets: Iterable[Bucket] | None = None) -> None:
        """Compiles `buckets` (default: the whole grid) now; plans otherwise compile what they use."""
        todo = list(self.buckets if buckets is None else buckets)
        self.compile_async(todo)
        for b in todo:
            self.compiled(b)

    def compile_stats(self) -> dict[str, float]:
        return self.executables.stats()

    def run_plan(
        self, plan: ScorePlan, *, skip: Callable[[np.ndarray], bool] | None = None
    ) -> Iterator[BatchAnswers]:
        """Runs the plan's batches in order, yielding one `BatchAnswers` per batch.

        Batches are dispatched one ahead of the result fetch: a batch's answers are yielded once
        the next batch is on the device, so the host never idles it while the caller stores
        them. A batch whose request indices satisfy `skip(indices int[n])` is not run: it is
        yielded at once with `ran` False, NaN / False answers and no tokens (the caller holds its
        answers: a resumed run). After the last batch, every request must have been answered
        exactly once (an `AssertionError` names the first that were not).
        """
        answered = np.zeros(plan.n_requests, np.int64)
        pending: list[tuple[PlannedScoreBatch, Any, float]] = []
        if jax.process_count() > 1:
            distributed.check_same("loglikelihood plan", score_plan_digest(plan))
        self.compile_async(plan.shapes)

        def fetched(pb: PlannedScoreBatch, out: Any, dispatched_at: float) -> BatchAnswers:
            ll, gr = to_host(out)
            used = pb.slot_request >= 0
            return BatchAnswers(
                indices=pb.slot_request[used],
                loglik=ll[used],
                greedy=gr[used],
                real_tokens=pb.real_tokens,
                dispatched_at=dispatched_at,
            )

        def counted(answers: BatchAnswers) -> BatchAnswers:
            np.add.at(answered, answers.indices, 1)
            return answers

        for pb in plan.batches:
            if skip is not None and skipped(pb, skip):
                yield counted(not_run(pb.slot_request[pb.slot_request >= 0]))
                continue
            fn = self.compiled(pb.bucket)
            batch = put_global(pb.batch, self.batch_sharding(pb.bucket))
            dispatched_at = time.perf_counter()
            pending.append((pb, fn(self.params, batch), dispatched_at))
            if len(pending) > 1:
                yield counted(fetched(*pending.pop(0)))
        for item in pending:
            yield counted(fetched(*item))
        if not np.all(answered == 1):
            bad = np.flatnonzero(answered != 1)[:10]
            raise AssertionError(
                f"requests {bad.tolist()} were answered {answered[bad].tolist()} times"
            )
