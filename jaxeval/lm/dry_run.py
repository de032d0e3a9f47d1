"""A run that computes nothing: what a run of some tasks asks of the model, and which executables it
would compile, with no parameters and no device.

    setup = run_setup(config, spec=spec, hf_config=hf, path=DIR, tokenizer=tok, mesh=mesh, ...)
    lm = DryRunLM(setup)
    simple_evaluate(model=lm, tasks=["arc_easy", "gsm8k"], bootstrap_iters=0, log_samples=False)
    lm.record.uses      # executable key -> `Use`: its kind, the task that used it first, calls
    lm.record.counts    # task -> `TaskCounts`: requests, tokens

`DryRunLM` is a `JaxLM` whose request methods are `JaxLM`'s own (lm-eval's encoding, truncation,
rolling windows and the one scoring plan per call); only where the run would reach the device it
records instead:

- scoring (`RecordingScorer`, the `Scorer`'s surface): each batch of the plan is charged to the
  tasks of its requests (a shared batch split by its requests) under its bucket, the scorer's own
  executable key; the answers are placeholders (0.0, False);
- generation (`RecordingGenerator`): the prompts by the run's rules (`prompts.build_prompts`), the
  run's engine (`engine.engine_plan`) and its rounds (`calls.engine_rounds`), whose typed keys are
  the executables' keys; the texts are placeholders ("").

Scoring keys are exact. Generation after the first admissions depends on when rows end (a stop
string, EOS), which only the model knows; the count assumes every row runs to its token budget
(`max_gen_toks`, or its stop-token cap). With every prompt admitted at once (copies <= engine
rows) and no tail move, that assumption changes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import numpy as np

from jaxeval.lm.executables import Executables
from jaxeval.lm.generate.calls import AdmitStep, PrefixStep, ShrinkStep, engine_rounds, init_of
from jaxeval.lm.generate.prompts import build_prompts
from jaxeval.lm.generate.schedule import Schedule
from jaxeval.lm.generate.shape import engine_plan
from jaxeval.lm.jax_lm import JaxLM
from jaxeval.lm.score.planner import ScorePlan
from jaxeval.lm.score.scorer import BatchAnswers
from jaxeval.lm.setup import RunSetup


@dataclasses.dataclass
class Use:
    """One executable of the run: its key (a scoring `Bucket`, or an engine call's key from
    `generate.calls`), its kind, the task that first uses it, and its calls per task."""

    key: Hashable
    kind: str  # score, prefix, admit, decode, init, peek, shrink
    first_task: str
    calls: dict[str, float] = dataclasses.field(default_factory=dict)

    def add(self, task: str, calls: float) -> None:
        self.calls[task] = self.calls.get(task, 0.0) + calls


@dataclasses.dataclass
class TaskCounts:
    requests: int = 0
    tokens: float = 0.0  # scored tokens (scoring), prompt + new tokens (generation)


@dataclasses.dataclass
class Record:
    """What a dry run saw: per task its requests and tokens, per executable its calls."""

    counts: dict[str, TaskCounts] = dataclasses.field(default_factory=dict)
    uses: dict[Hashable, Use] = dataclasses.field(default_factory=dict)
    score_plans: list[ScorePlan] = dataclasses.field(default_factory=list)

    def count(self, task: str, requests: int = 0, tokens: float = 0.0) -> None:
        c = self.counts.setdefault(task, TaskCounts())
        c.requests += requests
        c.tokens += tokens

    def use(self, key: Hashable, kind: str, task: str, calls: float, first: str = "") -> None:
        """`task` makes `calls` calls of the executable `key`; `first`: the task that used it
        first (default `task`)."""
        if key not in self.uses:
            self.uses[key] = Use(key=key, kind=kind, first_task=first or task)
        self.uses[key].add(task, calls)


class RecordingScorer:
    """The `Scorer`'s surface for `JaxLM.loglikelihood_tokens`: no executable, placeholder answers,
    each batch charged to the tasks of its requests (`task_of(request index)`)."""

    def __init__(self, record: Record, task_of: Callable[[int], str]):
        self.record = record
        self.task_of = task_of
        self.executables = Executables()  # stays empty: every bucket counts as a compile

    @property
    def compile_count(self) -> int:
        return 0

    def compile_stats(self) -> dict[str, float]:
        return self.executables.stats()

    def run_plan(
        self, plan: ScorePlan, *, skip: Callable[[np.ndarray], bool] | None = None
    ) -> Iterator[BatchAnswers]:
        self.record.score_plans.append(plan)
        for pb in plan.batches:
            idx = pb.slot_request[pb.slot_request >= 0]
            owners = [self.task_of(int(i)) for i in idx]
            tasks, n = np.unique(np.asarray(owners), return_counts=True)
            first = self.task_of(int(idx.min()))
            for task, k in zip(tasks.tolist(), n.tolist()):
                share = k / len(idx)
                self.record.use(pb.bucket, "score", task, share, first)
                self.record.count(task, tokens=pb.real_tokens * share)
            yield BatchAnswers(
                indices=idx,
                loglik=np.zeros(len(idx), np.float32),
                greedy=np.zeros(len(idx), bool),
                real_tokens=int(pb.real_tokens),
                dispatched_at=None,
            )


class RecordingGenerator:
    """The `Generator`'s `generate_until` for a dry run: the run's prompts and engine rounds,
    counted per task (`tasks[i]`: request i's task), placeholder texts."""

    def __init__(self, record: Record, setup: RunSetup, tasks: Sequence[str]):
        self.record, self.setup, self.tasks = record, setup, list(tasks)

    def generate_until(
        self,
        requests: Sequence[tuple[str, dict]],
        *,
        same: Sequence[int] | None = None,
        disable_tqdm: bool = False,
        on_answers: Any = None,
    ) -> list[str]:
        if not requests:
            return []
        prompts = build_prompts(self.setup.rules, requests, same=same)
        for task in self.tasks:
            self.record.count(task, requests=1)
        task_of = {id(pr): self.tasks[pr.outputs[0]] for pr in prompts}
        for pr in prompts:
            self.record.count(task_of[id(pr)], tokens=(len(pr.tokens) + pr.max_new) * pr.copies)
        self._count_rounds(prompts, task_of)
        return [""] * len(requests)

    def _count_rounds(self, prompts: Sequence[Any], task_of: dict[int, str]) -> None:
        """The engine's rounds (`calls.engine_rounds`), every row running to its budget."""
        s, config = self.setup, self.setup.config.gen_config
        if config.continuous is False:
            raise NotImplementedError("the dry run follows the continuous engine (the default)")
        groups, shape = engine_plan(
            prompts, config, spec=s.spec, shards=s.shards, free_bytes=s.engine_free_bytes
        )
        use, first = self.record.use, task_of[id(prompts[0])]
        use(init_of(shape), "init", first, 1)
        schedule = Schedule(prompts, groups, rows=shape.rows, shards=s.shards, config=config)
        ends: dict[int, int] = {}  # engine row -> the step its prompt's budget runs out
        step = 0
        for round_ in engine_rounds(schedule, shape):
            for st in round_.steps:
                if isinstance(st, PrefixStep) and st.key is not None:
                    task = task_of[id(st.admission.calls[0].items[0].prompt)]
                    use(st.key, st.key.kind, task, 1)
                elif isinstance(st, AdmitStep):
                    for it, row in zip(st.call.items, st.call.rows):
                        use(st.key, st.key.kind, task_of[id(it.prompt)], 1 / len(st.call.items))
                        ends[row] = step + it.prompt.max_new
                elif isinstance(st, ShrinkStep):
                    use(st.key, st.key.kind, first, 1)
                    ends = {new: ends[old] for new, old in enumerate(st.keep) if old in ends}
            decode = round_.decode
            occupant = schedule.occupant
            idle = decode.key.engine.rows - len(occupant)  # rows with nothing in them are done
            need = max(0, decode.want - idle)
            order = sorted(ends[row] for row in occupant)
            until = order[min(need, len(order)) - 1] if need and order else step
            live = [task_of[id(it.prompt)] for it in occupant.values()]
            for task in live:
                use(decode.key, decode.key.kind, task, max(0, until - step) / len(live), first)
            use(decode.peek, decode.peek.kind, first, 0)
            step = until
            for row, _ in schedule.finish([row for row in occupant if ends[row] <= step]):
                del ends[row]


class DryRunLM(JaxLM):
    """A `JaxLM` on a `RunSetup` alone that records instead of computing (module docstring)."""

    def __init__(self, setup: RunSetup):  # no model to load: the setup is the run's
        self.config = setup.config
        self._adopt(setup)
        self.record = Record()
        self.scorer: Any = RecordingScorer(self.record, lambda i: "")  # each call makes its own

    def model_info(self) -> dict[str, Any]:
        return {"model_type": getattr(self.setup.spec, "model_type", None)}

    def loglikelihood(self, requests: Sequence[Any], disable_tqdm: bool = False, **kw: Any) -> list:
        for r in requests:
            self.record.count(str(r.task_name), requests=1)
        return super().loglikelihood(requests, disable_tqdm=True, **kw)

    def loglikelihood_rolling(
        self, requests: Sequence[Any], disable_tqdm: bool = False, **kw: Any
    ) -> list:
        for r in requests:
            self.record.count(str(r.task_name), requests=1)
        return super().loglikelihood_rolling(requests, disable_tqdm=True, **kw)

    def loglikelihood_tokens(self, encoded: Sequence, *, describe: Any = None, **kw: Any) -> Any:
        """`JaxLM.loglikelihood_tokens`, its batches charged to the task `describe(i)` names."""
        if describe is not None:
            self.scorer = RecordingScorer(self.record, lambda i: str(describe(i)["task"]))
        return super().loglikelihood_tokens(encoded, describe=describe, **kw)

    def generate_until(
        self, requests: Sequence[Any], disable_tqdm: bool = False, **kw: Any
    ) -> list:
        self.generator = RecordingGenerator(  # type: ignore[assignment]
            self.record, self.setup, [str(r.task_name) for r in requests]
        )
        return super().generate_until(requests, disable_tqdm=True, **kw)

    def generation(self) -> Any:
        return self.generator
