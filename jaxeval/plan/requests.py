"""What a run of some tasks asks of the model, and which executables it compiles, without a model.

    recorder = RequestRecorder(setup)              # an LM that plans instead of computing
    simple_evaluate(model=recorder, tasks=[...])   # the run's own task, prompt and request code
    uses = recorder.executables(build_engine)      # key -> `Use`: its `Planned`, calls per task

The recorder answers every request with a placeholder (0.0 / False / "") after doing what
`JaxLM` does with it up to the device: the same `Encoder`, truncation and `plan_score_batches`
call per request type (one call for loglikelihood, one for rolling windows, as the evaluator sends
them), and for generation the `Generator`'s own prompt rules (`Generator.prompts`) and the
continuous engine's schedule (`lm.generate.engine`: prefix groups, engine shape, admission
chunks, tail moves).

Scoring shapes are exact: the plan's distinct buckets are what the `Scorer` compiles. Generation
shapes after the first admissions depend on when rows end (a stop string, EOS), which only the
model knows; the schedule here assumes every row runs to its token budget (`max_gen_toks`, or
its stop-token cap). With every prompt admitted at once (copies <= engine rows) and no tail move,
that assumption changes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from jaxeval.evaluator import simple_evaluate
from jaxeval.lm.base import LM
from jaxeval.lm.encoding import Encoder, rolling_windows
from jaxeval.lm.generate.engine import engine_shape
from jaxeval.lm.generate.generator import Generator
from jaxeval.lm.generate.kwargs import SamplingDefaults
from jaxeval.lm.generate.plan import Prompt, prefill_bucket, request_pairs
from jaxeval.lm.generate.prefixes import PrefixGroup, shared_prefixes
from jaxeval.lm.generate.schedule import Schedule
from jaxeval.lm.generate.sizing import engine_rows
from jaxeval.lm.jax_lm import truncate_all
from jaxeval.lm.model_config import JaxLMConfig
from jaxeval.lm.score.buckets import Bucket, BucketSet
from jaxeval.lm.score.planner import ScorePlan, plan_score_batches


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSetup:
    """What the run decides before any request: the model's arguments, tokenizer, lengths, bucket
    grid, batch shards, and the memory a device has left for the generation engine."""

    config: JaxLMConfig
    tokenizer: Any
    max_length: int
    token_budget: int
    buckets: BucketSet
    point_cost: float
    shards: int
    free_bytes: int | None  # per device, after the parameters (None: the CPU's rule)
    spec: Any
    eos_ids: tuple[int, ...]
    sampling_defaults: SamplingDefaults
    specials: Any


@dataclasses.dataclass(frozen=True)
class _PromptRules:
    """The attributes `Generator.prompts` reads, from a `RunSetup` (no model, no device)."""

    encoder: Encoder
    config: Any
    eos_string: str | None
    sampling_defaults: SamplingDefaults
    max_length: int
    eos_ids: tuple[int, ...]
    specials: Any


@dataclasses.dataclass
class Use:
    """One executable of the run: its key, what it is (`kind`, `detail`: the numbers that build it),
    the task that first uses it, and its calls per task (a shared batch split by its requests)."""

    key: Hashable
    kind: str  # score, prefix, admit, decode, init, peek, shrink
    detail: Any
    first_task: str
    calls: dict[str, float] = dataclasses.field(default_factory=dict)

    def add(self, task: str, calls: float) -> None:
        self.calls[task] = self.calls.get(task, 0.0) + calls


@dataclasses.dataclass
class TaskCounts:
    requests: int = 0
    tokens: float = 0.0  # scored tokens (scoring), prompt + new tokens (generation)


class RequestRecorder(LM):
    """An LM that records what each request would cost and answers with placeholders."""

    def __init__(self, setup: RunSetup):
        self.setup = setup
        config = setup.config
        self.encoder = Encoder(
            setup.tokenizer,
            add_bos_token=config.add_bos_token,
            prefix_token_id=config.prefix_token_id,
        )
        self.counts: dict[str, TaskCounts] = {}
        self.uses: dict[Hashable, Use] = {}
        self.score_plans: list[ScorePlan] = []
        self.prompts: list[Prompt] = []
        self.prompt_tasks: list[str] = []

    # lm-eval's properties the evaluator and tasks read
    @property
    def tokenizer(self) -> Any:
        return self.setup.tokenizer

    @property
    def eot_token_id(self) -> int:
        return self.setup.tokenizer.eos_token_id

    @property
    def max_length(self) -> int:
        return self.setup.max_length

    @property
    def tokenizer_name(self) -> str:
        return self.setup.tokenizer.name_or_path.replace("/", "__")

    def _count(self, task: str, requests: int = 0, tokens: float = 0.0) -> None:
        c = self.counts.setdefault(task, TaskCounts())
        c.requests += requests
        c.tokens += tokens

    def _use(
        self, key: Hashable, kind: str, detail: Any, task: str, calls: float, first: str = ""
    ) -> None:
        """`task` makes `calls` calls of the executable `key`; `first`: the task that used it
        first (default `task`)."""
        if key not in self.uses:
            self.uses[key] = Use(key=key, kind=kind, detail=detail, first_task=first or task)
        self.uses[key].add(task, calls)

    # ---- scoring --------------------------------------------------------------------------
    def _score(self, encoded: Sequence, owners: Sequence[str]) -> None:
        """`JaxLM.loglikelihood_tokens` up to the device: truncation and the one plan."""
        if not encoded:
            return
        s = self.setup
        plan = plan_score_batches(
            truncate_all(encoded, s.max_length),
            s.buckets,
            packing=s.config.packing,
            shared_context=s.config.shared_context,
            point_cost=s.point_cost,
        )
        self.score_plans.append(plan)
        for pb in plan.batches:
            idx = pb.slot_request[pb.slot_request >= 0]
            tasks, n = np.unique(np.asarray([owners[i] for i in idx]), return_counts=True)
            first = owners[int(idx.min())]
            for task, k in zip(tasks.tolist(), n.tolist()):
                share = k / len(idx)
                self._use(pb.bucket, "score", pb.bucket, task, share, first)
                self._count(task, tokens=pb.real_tokens * share)

    def loglikelihood(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list:
        owners = [str(r.task_name) for r in requests]
        for task in owners:
            self._count(task, requests=1)
        self._score(self.encoder.encode_requests([tuple(r.args[:2]) for r in requests]), owners)
        return [(0.0, False)] * len(requests)

    def loglikelihood_rolling(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list:
        windows, owners = [], []
        documents = self.encoder.tok_encode_many([r.args[0] for r in requests])
        for req, ids in zip(requests, documents):
            self._count(str(req.task_name), requests=1)
            w = rolling_windows(
                ids, prefix_token=self.encoder.prefix_token_id, max_length=self.setup.max_length
            )
            windows += w
            owners += [str(req.task_name)] * len(w)
        self._score(windows, owners)
        return [0.0] * len(requests)

    # ---- generation -----------------------------------------------------------------------
    def generate_until(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[str]:
        """The `Generator`'s prompts (one call for every task, as the evaluator sends them)."""
        if not requests:
            return []
        s = self.setup
        tok = s.tokenizer
        eot = tok.eos_token_id
        rules = _PromptRules(
            encoder=self.encoder,
            config=s.config.gen_config,
            eos_string=tok.decode(eot, skip_special_tokens=False) if eot is not None else None,
            sampling_defaults=s.sampling_defaults,
            max_length=s.max_length,
            eos_ids=s.eos_ids,
            specials=s.specials,
        )
        pairs, same = request_pairs(requests)
        prompts = Generator.prompts(rules, pairs, same=same)  # type: ignore[arg-type]
        for req in requests:
            self._count(str(req.task_name), requests=1)
        for pr in prompts:
            task = str(requests[pr.outputs[0]].task_name)
            self.prompts.append(pr)
            self.prompt_tasks.append(task)
            self._count(task, tokens=(len(pr.tokens) + pr.max_new) * pr.copies)
        self._schedule(prompts, [str(requests[pr.outputs[0]].task_name) for pr in prompts])
        return [""] * len(requests)

    def _schedule(self, prompts: Sequence[Prompt], tasks: Sequence[str]) -> None:
        """`engine.run_continuous`'s loop on its `Schedule`, every row running to its budget
        (module docstring)."""
        s, config = self.setup, self.setup.config.gen_config
        if config.continuous is False:
            raise NotImplementedError("the plan follows the continuous engine (the default)")
        groups = (
            shared_prefixes(prompts, config.min_prefix)
            if config.min_prefix > 0
            else [PrefixGroup((), (i,)) for i in range(len(prompts))]
        )
        rows, slots, n_new, sample = engine_shape(prompts, groups, config.batch_size, s.shards)
        fit = engine_rows(
            s.spec,
            free_bytes=s.free_bytes,
            shards=s.shards,
            slots=slots,
            wanted=rows,
            explicit=not config.fit_rows,
        )
        rows = fit.rows
        shape = (slots, n_new, sample)
        task_of = {id(pr): t for pr, t in zip(prompts, tasks)}
        first = tasks[0]
        self._use(("init", rows, slots, n_new), "init", (rows, *shape), first, 1)
        schedule = Schedule(prompts, groups, rows=rows, shards=s.shards, config=config)
        ends: dict[int, int] = {}  # engine row -> the step its prompt's budget runs out
        step = 0
        while schedule.busy:
            engine = schedule.rows
            for admission in schedule.admit():
                width_p = prefill_bucket(len(admission.prefix)) if admission.prefix else 0
                if admission.first:
                    task = task_of[id(admission.calls[0].items[0].prompt)]
                    self._use(("prefix", width_p), "prefix", (rows, *shape, width_p), task, 1)
                for call in admission.calls:
                    key = (
                        "admit",
                        engine,
                        slots,
                        n_new,
                        sample,
                        call.u,
                        call.r,
                        width_p,
                        call.width,
                    )
                    detail = (engine, *shape, call.u, call.r, width_p, call.width)
                    for it, row in zip(call.items, call.rows):
                        self._use(key, "admit", detail, task_of[id(it.prompt)], 1 / len(call.items))
                        ends[row] = step + it.prompt.max_new
            move = schedule.tail()
            if move is not None:
                target, keep = move
                key = ("shrink", engine, target, slots, n_new)
                self._use(key, "shrink", (engine, *shape, target), first, 1)
                ends = {new: ends[old] for new, old in enumerate(keep) if old in ends}
                engine = target
            want = schedule.want()
            occupant = schedule.occupant
            idle = engine - len(occupant)  # rows with nothing in them count as done
            need = max(0, want - idle)
            order = sorted(ends[row] for row in occupant)
            until = order[min(need, len(order)) - 1] if need and order else step
            steps = max(0, until - step)
            live = [task_of[id(it.prompt)] for it in occupant.values()]
            key = ("decode", engine, slots, n_new, sample, 1)
            for task in live:
                self._use(key, "decode", (engine, *shape), task, steps / len(live), first)
            self._use(("peek", engine, slots, n_new), "peek", (engine, *shape), first, 0)
            step = until
            done = [row for row in occupant if ends[row] <= step]
            for row, _ in schedule.finish(done):
                del ends[row]


def score_buckets_of(uses: dict[Hashable, Use]) -> list[Bucket]:
    return [u.detail for u in uses.values() if u.kind == "score"]


def executable_keys(uses: dict[Hashable, Use]) -> set[Hashable]:
    """The keys the run's `Executables` hold at its end (scorer's and generator's together)."""
    return set(uses)


def run_tasks(recorder: RequestRecorder, tasks: list[str], **evaluate: Any) -> None:
    """The run's task code (`simple_evaluate`) with `recorder` as the model; `evaluate`:
    num_fewshot, limit, task_manager, gen_kwargs, ... as the run takes them."""
    simple_evaluate(model=recorder, tasks=tasks, bootstrap_iters=0, log_samples=False, **evaluate)
