"""Shared prompt prefixes: prompts whose token ids begin alike are prefilled once.

    groups = shared_prefixes(prompts, min_prefix=MIN_PREFIX)   # [PrefixGroup(tokens, members)]

       prompts  [a b c d e f]  [a b c d x]  [a b c y z w]  [q r]      MIN_PREFIX 3
       groups   prefix [a b c] (3 tokens) for the first three; [q r] alone (no prefix)

The continuous engine (`jaxeval.lm.generate.engine`) prefills each group's prefix once and only
each prompt's suffix after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxeval.lm.generate.config import MIN_PREFIX
from jaxeval.lm.generate.plan import Prompt


@dataclasses.dataclass(frozen=True)
class PrefixGroup:
    tokens: tuple[int, ...]  # the shared prefix (empty: no sharing)
    members: tuple[int, ...]  # indices into the prompt list


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def shared_prefixes(prompts: Sequence[Prompt], min_prefix: int = MIN_PREFIX) -> list[PrefixGroup]:
    """Groups of prompts with a common token prefix of >= `min_prefix` tokens (module docstring).

    A neighbour joins the current group while the group's common prefix stays >= min_prefix and
    keeps at least half its length (so a weak match does not shrink a long shared block).
    """
    order = sorted(range(len(prompts)), key=lambda i: (prompts[i].tokens, i))
    groups: list[list[int]] = []
    lcps: list[int] = []
    for i in order:
        toks = prompts[i].tokens
        if groups:
            head = prompts[groups[-1][0]].tokens
            shared = min(lcps[-1], _lcp(head, toks))
            if shared >= min_prefix and shared * 2 >= lcps[-1]:
                groups[-1].append(i)
                lcps[-1] = shared
                continue
        groups.append([i])
        lcps.append(len(toks))
    out = []
    for members, n in zip(groups, lcps):
        shortest = min(len(prompts[i].tokens) for i in members)
        n = min(n, shortest - 1)  # every prompt keeps >= 1 token of its own
        if len(members) < 2 or n < min_prefix:
            out.extend(PrefixGroup((), (i,)) for i in members)
        else:
            out.append(PrefixGroup(prompts[members[0]].tokens[:n], tuple(sorted(members))))
    return out
