"""The one engine of a run of prompts: its shape from the work, its rows from the memory rule.

    groups, shape = engine_plan(prompts, gen_config, spec=spec, shards=8, free_bytes=F)
    shape  -> EngineShape(rows=64, slots=384, n_new=32, sample=False)

The run (`engine.run_continuous`) and a dry run (`jaxeval.lm.dry_run`, `jaxeval plan`) both start
here, the run with what its devices have free when generation starts, the plan with the chip's HBM
left after the parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jaxeval.lm.generate.calls import EngineShape
from jaxeval.lm.generate.plan import MIN_BUCKET, Prompt, prompt_bucket
from jaxeval.lm.generate.prefixes import PrefixGroup, shared_prefixes
from jaxeval.lm.generate.sizing import engine_rows
from jaxeval.platform import distributed
from jaxeval.shapes import pow2_at_least


def engine_shape(
    prompts: Sequence[Prompt], groups: Sequence[PrefixGroup], batch_size: int, shards: int
) -> tuple[int, int, int, bool]:
    """(B rows, C slots, N new tokens, sampled): one engine for all the prompts.

    B is the batch size, but never more rows than the work has copies (rounded up to a power of
    two, then to the shard count): four prompts decode in four rows, not in sixteen. A batch size
    below the shard count stays as it is (`sizing.engine_rows` keeps it, given explicitly, when
    each row's slots split over the shards, else rounds it up).
    """
    copies = pow2_at_least(sum(pr.copies for pr in prompts), 1)
    rows = max(shards, -(-min(batch_size, copies) // shards) * shards)
    if batch_size < shards:
        rows = pow2_at_least(min(batch_size, copies), 1)
    n_new = pow2_at_least(max(pr.max_new for pr in prompts), MIN_BUCKET)
    need = 0
    for g in groups:
        sp = prompt_bucket(len(g.tokens)) if g.tokens else 0
        suffix = max(len(prompts[i].tokens) - len(g.tokens) for i in g.members)
        need = max(need, sp + prompt_bucket(suffix))
    sample = any(pr.settings.do_sample for pr in prompts)
    return rows, prompt_bucket(need + n_new), n_new, sample


def engine_plan(
    prompts: Sequence[Prompt], config: Any, *, spec: Any, shards: int, free_bytes: int | None
) -> tuple[list[PrefixGroup], EngineShape]:
    """The prefix groups (`shared_prefixes`, `config.min_prefix`) and the one engine of a run of
    `prompts`: `engine_shape`, its rows fitted to `free_bytes` per device (`sizing.engine_rows`,
    the same over the run's processes). The run and `jaxeval plan` both start here."""
    groups = (
        shared_prefixes(prompts, config.min_prefix)
        if config.min_prefix > 0
        else [PrefixGroup((), (i,)) for i in range(len(prompts))]
    )
    rows, slots, n_new, sample = engine_shape(prompts, groups, config.batch_size, shards)
    fit = engine_rows(
        spec,
        free_bytes=free_bytes,
        shards=shards,
        slots=slots,
        wanted=rows,
        explicit=not config.fit_rows,
    )
    return groups, EngineShape(distributed.agree_min(fit.rows), slots, n_new, sample)
