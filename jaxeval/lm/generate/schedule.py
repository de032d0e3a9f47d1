"""The continuous engine's schedule: which prompt goes into which engine row when, in which
`admit` call, and when the live rows move into a smaller engine. Pure Python, no device: its
rounds of typed calls (`calls.engine_rounds`) are what the run (`engine.run_continuous`) runs, with
the rows the device reports done, and what a dry run (`jaxeval.lm.dry_run`, `jaxeval plan`) counts,
with the rows it expects done, so both follow one schedule.

    schedule = Schedule(prompts, groups, rows=B, shards=S, config=gen_config)
    while schedule.busy:
        for admission in schedule.admit():       # free rows take the queue's head
            ...                                  # a prefix (admission.first), then its `calls`
        move = schedule.tail()                   # (rows, keep): into a smaller engine, or None
        want = schedule.want()                   # rows done (or free) that end the next chunk
        ...                                      # decode until then
        finished = schedule.finish(done_rows)    # [(row, item)], their rows freed

The order (module docstring of `engine`): by prefix group, then longest expected output
(`max_new`) first, then longest prompt, then request index (`admission="request"`: request
order within a group, for tests).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Sequence
from typing import Any

from jaxeval.lm.generate.plan import Prompt, prefill_bucket
from jaxeval.lm.generate.prefixes import PrefixGroup
from jaxeval.lm.generate.sizing import ADMIT_TOKENS
from jaxeval.shapes import pow2_at_least


@dataclasses.dataclass
class Item:
    """One copy of one prompt in the queue."""

    prompt: Prompt
    copy: int  # which of the prompt's copies (repeat index)
    group: int  # prefix group
    start: int  # prefix length S


@dataclasses.dataclass(frozen=True)
class Call:
    """One `admit` call: `items` into engine `rows` (one each), the distinct prompts among them
    (`prompts`, U of them padded to `u`, a power of two) prefilled once after `start` prefix
    tokens, suffixes padded to `width`; `src[k]`: the index in `prompts` of item k's prompt; the
    R = `r` (a power of two) admitted rows."""

    items: tuple[Item, ...]
    rows: tuple[int, ...]
    start: int

    @functools.cached_property
    def prompts(self) -> list[Prompt]:
        return list({id(it.prompt): it.prompt for it in self.items}.values())

    @property
    def src(self) -> list[int]:
        index = {id(p): k for k, p in enumerate(self.prompts)}
        return [index[id(it.prompt)] for it in self.items]

    @property
    def u(self) -> int:
        return pow2_at_least(len(self.prompts), 1)

    @property
    def r(self) -> int:
        return pow2_at_least(len(self.items), 1)

    @property
    def width(self) -> int:
        return prefill_bucket(max(len(p.tokens) - self.start for p in self.prompts))


@dataclasses.dataclass(frozen=True)
class Admission:
    """Free rows filled from one prefix group: its prefix (`first`: not used before, so prefill
    it) and the `admit` calls after it."""

    group: int
    prefix: tuple[int, ...]
    first: bool
    calls: tuple[Call, ...]


def admission_chunks(taken: Sequence[Any], start: int) -> list[list[Any]]:
    """The admitted copies (queue order, copies of a prompt adjacent; anything with `.prompt`) cut
    into `admit` calls.

    A call prefills U = pow2(distinct prompts) suffixes padded to one `prefill_bucket`, and padding
    is computed like real tokens, so a call grows only while U x width stays within ADMIT_TOKENS
    (a longer prompt is prefilled alone):

        suffixes 1,233 / 1,006 / 953 / 858 tokens -> 1 x 1,280 | 2 x 1,024 | 1 x 896
            (4,224 tokens computed for 4,050; one call of 4 x 1,536 would compute 6,144)
        40 suffixes of 50 tokens -> calls of 32 x 64, then 8 x 64
    """
    chunks: list[list[Any]] = []
    chunk: list[Any] = []
    prompts: set[int] = set()
    longest = 0
    for it in taken:
        n = len(it.prompt.tokens) - start
        new = id(it.prompt) not in prompts
        cost = pow2_at_least(len(prompts) + new, 1) * prefill_bucket(max(longest, n))
        if chunk and new and cost > ADMIT_TOKENS:
            chunks.append(chunk)
            chunk, prompts, longest = [], set(), 0
        chunk.append(it)
        prompts.add(id(it.prompt))
        longest = max(longest, n)
    if chunk:
        chunks.append(chunk)
    return chunks


def tail_rows(live: int, rows: int, shards: int) -> int:
    """The engine rows for `live` rows once the queue is empty: the fewest multiple of `shards` times
    a power of two that holds them, when that is at most half of `rows`; else `rows` (no move)."""
    target = shards * pow2_at_least(-(-max(live, 1) // shards), 1)
    return target if 2 * target <= rows else rows


def tail_threshold(rows: int, shards: int) -> int:
    """The most live rows for which `tail_rows` moves to a smaller engine (0: it never does)."""
    size, k = 0, shards
    while 2 * k <= rows:
        size, k = k, 2 * k
    return size


class Schedule:
    """The queue and the engine rows of one `run_continuous` (module docstring). `config` is the
    `GenConfig` (`refill_rows`, `tail`, `admission`)."""

    def __init__(
        self,
        prompts: Sequence[Prompt],
        groups: Sequence[PrefixGroup],
        *,
        rows: int,
        shards: int,
        config: Any,
    ):
        self.groups = [*groups, PrefixGroup((), ())]  # the last: every prompt without a prefix
        no_prefix = len(groups)
        items: list[Item] = []
        for gi, g in enumerate(groups):
            for i in g.members:
                pr = prompts[i]
                group = gi if g.tokens else no_prefix
                items += [Item(pr, j, group, len(g.tokens)) for j in range(pr.copies)]
        if (
            config.admission == "request"
        ):  # plain request order (tests: results do not depend on it)
            items.sort(key=lambda it: (it.group, it.prompt.request_index, it.copy))
        else:
            items.sort(
                key=lambda it: (
                    it.group,
                    -it.prompt.max_new,
                    -len(it.prompt.tokens),
                    it.prompt.request_index,
                    it.copy,
                )
            )
        self.items = items  # queue order
        self.queue = list(reversed(items))  # pop() takes the head
        self.rows = rows  # the engine's rows now (the tail moves to fewer)
        self.shards = shards
        self.refill = (
            max(1, rows // 4) if config.refill_rows is None else max(1, int(config.refill_rows))
        )
        self.tail_on = bool(config.tail)
        self.free = list(range(rows))
        self.occupant: dict[int, Item] = {}
        self.prefixed: set[int] = set()  # groups whose prefix is prefilled

    @property
    def busy(self) -> bool:
        return bool(self.queue or self.occupant)

    def admit(self) -> list[Admission]:
        """Free rows take the queue's head, one prefix group at a time (the lowest free rows
        first), cut into `admit` calls (`admission_chunks`)."""
        out = []
        while self.queue and self.free:
            head = self.queue[-1]
            taken: list[Item] = []
            while self.queue and len(taken) < len(self.free) and self.queue[-1].group == head.group:
                taken.append(self.queue.pop())
            group = self.groups[head.group]
            first = head.group not in self.prefixed and bool(group.tokens)
            self.prefixed.add(head.group)
            start = len(group.tokens)
            calls = []
            for chunk in admission_chunks(taken, start):
                rows = tuple(self.free.pop(0) for _ in chunk)
                self.occupant.update(zip(rows, chunk))
                calls.append(Call(tuple(chunk), rows, start))
            out.append(Admission(head.group, tuple(group.tokens), first, tuple(calls)))
        return out

    def tail(self) -> tuple[int, list[int]] | None:
        """Once the queue is empty: (rows, keep) when few enough rows are live for a smaller engine
        (`tail_rows`): the old rows that become rows 0, 1, ... of the new one (the live rows, then
        done rows to fill it); None otherwise."""
        if not (self.tail_on and not self.queue and self.occupant):
            return None
        target = tail_rows(len(self.occupant), self.rows, self.shards)
        if target >= self.rows:
            return None
        live = sorted(self.occupant)
        spare = [r for r in range(self.rows) if r not in self.occupant]  # done rows
        keep = live + spare[: target - len(live)]
        self.occupant = {new: self.occupant[old] for new, old in enumerate(live)}
        self.free = list(range(len(live), target))
        self.rows = target
        return target, keep

    def want(self) -> int:
        """How many rows done (free rows count as done) end the next decode chunk: enough to
        refill (`refill_rows`) while the queue holds prompts; then all of them, or few enough
        live for the tail's next smaller engine (`rows + 1`: never, run to the end)."""
        if self.queue:
            return len(self.free) + min(len(self.queue), self.refill)
        low = tail_threshold(self.rows, self.shards) if self.tail_on else 0
        return self.rows - low if low else self.rows + 1

    def finish(self, done: Iterable[int]) -> list[tuple[int, Item]]:
        """Frees the occupied rows among `done`: [(row, item)] in row order."""
        finished = [
            (row, self.occupant.pop(row)) for row in sorted(set(done)) if row in self.occupant
        ]
        self.free.extend(row for row, _ in finished)
        self.free.sort()
        return finished
