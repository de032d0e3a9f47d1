"""The continuous engine's calls as typed values: each says what the engine does next and is the
key of the executable that does it. `engine_rounds` publishes a run's calls round by round from
its `Schedule`; `engine.run_continuous` runs them on the device, and `jaxeval plan` counts them
(`jaxeval.plan.requests`): one schedule, one set of keys, nothing restated.

    EngineShape(rows=8, slots=384, n_new=32, sample=False)     B rows, C slots, N new tokens
    Init(rows=8, slots=384, n_new=32)                  the engine's empty state
    Prefix(width=256)                                  a shared prefix's prefill (any engine)
    Admit(engine, admitted=2, admit_rows=4, prefix_width=256, width=64)
                                                       U prompts' suffixes into R rows
    Decode(engine)                                     a decode chunk (until `want` rows are done)
    Peek(rows=8, slots=384, n_new=32)                  the state's host read
    Shrink(rows=8, slots=384, n_new=32, target=2)      the live rows into a smaller engine

A round, as the run takes it:

    for round in engine_rounds(schedule, shape):
        for step in round.steps:            # AdmitStep(key, admission, call), ShrinkStep, ...
            run(step)                       # the executable of `step.key`
        schedule.finish(rows the device reports done)    # before the next round is asked for
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import ClassVar

from jaxeval.lm.generate.plan import prefill_bucket
from jaxeval.lm.generate.schedule import Admission, Call, Schedule


@dataclasses.dataclass(frozen=True)
class EngineShape:
    """One engine: B rows, C slots a row, N new tokens at most, sampled or greedy."""

    rows: int
    slots: int
    n_new: int
    sample: bool

    def with_rows(self, rows: int) -> EngineShape:
        return dataclasses.replace(self, rows=rows)


@dataclasses.dataclass(frozen=True)
class _OnRows:
    """A call whose program depends on the engine's rows, slots and new tokens, never on whether
    it samples (the state's creation, its host read, the tail's move): one executable for both."""

    kind: ClassVar[str]
    rows: int
    slots: int
    n_new: int

    @property
    def shape(self) -> EngineShape:
        return EngineShape(self.rows, self.slots, self.n_new, False)

    def describe(self) -> str:
        return f"{self.kind} {self.rows} x {self.slots} slots"


class Init(_OnRows):
    kind = "init"


@dataclasses.dataclass(frozen=True)
class Prefix:
    kind: ClassVar[str] = "prefix"
    width: int  # the prefix padded to a `prefill_bucket`

    def describe(self) -> str:
        return f"prefix {self.width} tokens"


@dataclasses.dataclass(frozen=True)
class Admit:
    kind: ClassVar[str] = "admit"
    engine: EngineShape
    admitted: int  # U distinct prompts (a power of two)
    admit_rows: int  # R engine rows they fill (a power of two)
    prefix_width: int  # the prefix cache's slots (0: none)
    width: int  # the suffixes padded to a `prefill_bucket`

    @property
    def shape(self) -> EngineShape:
        return self.engine

    def describe(self) -> str:
        e = self.engine
        after = f" after {self.prefix_width}" if self.prefix_width else ""
        where = f"{self.admit_rows} of {e.rows} x {e.slots} slots"
        return f"admit {self.admitted} x {self.width} tokens into {where}{after}"


@dataclasses.dataclass(frozen=True)
class Decode:
    kind: ClassVar[str] = "decode"
    engine: EngineShape
    steps_per_iteration: int = 1  # > 1 only to count one step's cost (`jaxeval plan`)

    @property
    def shape(self) -> EngineShape:
        return self.engine

    def describe(self) -> str:
        return f"decode step {self.engine.rows} x {self.engine.slots} slots"


class Peek(_OnRows):
    kind = "peek"


@dataclasses.dataclass(frozen=True)
class Shrink(_OnRows):
    kind = "shrink"
    target: int  # the smaller engine's rows

    def describe(self) -> str:
        return f"move {self.rows} -> {self.target} rows of {self.slots} slots"


EngineKey = Init | Prefix | Admit | Decode | Peek | Shrink


def init_of(shape: EngineShape) -> Init:
    return Init(shape.rows, shape.slots, shape.n_new)


def peek_of(shape: EngineShape) -> Peek:
    return Peek(shape.rows, shape.slots, shape.n_new)


def shrink_of(shape: EngineShape, target: int) -> Shrink:
    return Shrink(shape.rows, shape.slots, shape.n_new, target=target)


# ---- one round's steps: a key and what the step works on ---------------------------------------
@dataclasses.dataclass(frozen=True)
class PrefixStep:
    """A prefix group's first admission: its prefix prefilled (`key` None: no prefix tokens, an
    empty prefix cache and no executable)."""

    key: Prefix | None
    admission: Admission


@dataclasses.dataclass(frozen=True)
class AdmitStep:
    key: Admit
    admission: Admission
    call: Call


@dataclasses.dataclass(frozen=True)
class ShrinkStep:
    key: Shrink
    keep: tuple[int, ...]  # the old rows that become rows 0, 1, ... of the smaller engine


@dataclasses.dataclass(frozen=True)
class DecodeStep:
    key: Decode
    want: int  # the chunk ends once this many rows are done (free rows count as done)
    peek: Peek  # then the state's host read says which


Step = PrefixStep | AdmitStep | ShrinkStep | DecodeStep


@dataclasses.dataclass(frozen=True)
class Round:
    """Admissions into the free rows, the tail's move, and one decode chunk."""

    steps: tuple[Step, ...]

    @property
    def decode(self) -> DecodeStep:
        last = self.steps[-1]
        assert isinstance(last, DecodeStep)
        return last


def engine_rounds(schedule: Schedule, shape: EngineShape) -> Iterator[Round]:
    """The engine's calls for `schedule`, a round at a time (module docstring). The caller frees
    the rows its decode chunk finished (`schedule.finish`) before it asks for the next round."""
    prefixed: set[int] = set()
    while schedule.busy:
        steps: list[Step] = []
        for admission in schedule.admit():
            width = prefill_bucket(len(admission.prefix)) if admission.prefix else 0
            if admission.group not in prefixed:
                prefixed.add(admission.group)
                steps.append(PrefixStep(Prefix(width) if admission.first else None, admission))
            for call in admission.calls:
                key = Admit(shape, call.u, call.r, width, call.width)
                steps.append(AdmitStep(key, admission, call))
        move = schedule.tail()
        if move is not None:  # the tail: the live rows into a smaller engine
            target, keep = move
            steps.append(ShrinkStep(shrink_of(shape, target), tuple(keep)))
            shape = shape.with_rows(target)
        steps.append(DecodeStep(Decode(shape), schedule.want(), peek_of(shape)))
        yield Round(tuple(steps))
