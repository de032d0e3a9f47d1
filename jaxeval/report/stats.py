"""Paired significance tests for two runs scored on the same documents.

A binary metric (acc, exact_match: every value 0 or 1) is compared with McNemar's exact test, which
looks only at the discordant documents:

                     B right   B wrong
        A right         .      b = 3       n = b + c = 4 documents changed their score;
        A wrong      c = 1        .        under "no difference" each change is a fair coin:
                                           p = 2 * P(Binomial(4, 1/2) <= 1) = 2 * 5/16 = 0.625

Any other per-document number (f1, bleu) uses a paired t-test on the differences d_i = B_i - A_i:
t = mean(d) / (sd(d) / sqrt(n)), two-sided, n - 1 degrees of freedom.
"""

from __future__ import annotations

import math
from fractions import Fraction


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for `b` documents A alone got right and `c` B alone did."""
    if b < 0 or c < 0:
        raise ValueError(f"counts must be non-negative, got {b}, {c}")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    term = 1  # C(n, 0)
    tail = 0
    for i in range(k + 1):
        tail += term
        term = term * (n - i) // (i + 1)  # C(n, i + 1), exact
    return float(min(Fraction(1), 2 * Fraction(tail, 2**n)))


def paired_t(differences: list[float]) -> tuple[float, float]:
    """(t, two-sided p) of a paired t-test on per-document differences B - A.

    All differences equal: t is 0 and p is 1 when they are 0, else t is infinite and p is 0.
    """
    from scipy.special import stdtr  # heavy: loaded only when a paired t-test runs

    n = len(differences)
    if n < 2:
        return 0.0, 1.0
    if max(differences) == min(differences):
        d = differences[0]
        return (0.0, 1.0) if d == 0 else (math.copysign(math.inf, d), 0.0)
    mean = math.fsum(differences) / n
    var = math.fsum((d - mean) ** 2 for d in differences) / (n - 1)
    t = mean / math.sqrt(var / n)
    return t, float(2.0 * stdtr(n - 1, -abs(t)))
