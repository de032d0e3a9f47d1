"""The finite set of batch shapes the scoring kernel is compiled for.

A bucket is one `(T, K)` row shape plus its row count B, chosen so that B * T is about a constant
token budget. Every batch the planner emits has exactly one bucket's shape, so the kernel compiles
once per bucket and never mid-run.

    make_buckets(max_length=2048, token_budget=16384)
    -> (T=256, K=32, B=64), (T=256, K=256, B=64), (T=512, K=64, B=32), (T=512, K=512, B=32),
       (T=1024, K=128, B=16), (T=1024, K=1024, B=16), (T=2048, K=256, B=8), (T=2048, K=2048, B=8)

The small-K bucket of each length serves rows with few scored tokens (multiple choice, LAMBADA),
where the LM head would otherwise run over mostly empty score points; the K=T bucket serves rows
that score nearly every token (rolling perplexity). The largest T is at least the model's
max_length, so every request (after lm-eval's own left truncation) fits some bucket.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from jaxeval.errors import JaxevalError
from jaxeval.models.attention.sequence import tokens_split

DEFAULT_TOKEN_BUDGET = 16384
DEFAULT_MIN_LENGTH = 256
DEFAULT_POINT_FRACTIONS = (0.125, 1.0)
FIT_MIN_LENGTH = 32
FIT_POINT_FRACTIONS = (0.03125, 0.125, 0.5, 1.0)


@dataclasses.dataclass(frozen=True, kw_only=True, order=True)
class Bucket:
    """One compiled shape: rows of `length` tokens (T) with `points` score points (K), `rows` per batch (B)."""

    length: int
    points: int
    rows: int

    def __post_init__(self) -> None:
        if min(self.length, self.points, self.rows) < 1:
            raise ValueError(f"bucket sizes must be >= 1: {self}")

    @property
    def slots(self) -> int:
        """S: request slots per batch (each request owns at least one score point)."""
        return self.rows * self.points

    def fits(self, tokens: int, points: int) -> bool:
        return tokens <= self.length and points <= self.points


@dataclasses.dataclass(frozen=True, kw_only=True)
class BucketSet:
    """A sorted, validated, finite set of buckets.

    `fit_rows=True` (the default grid, `fitted_buckets`) lets the planner cut a bucket's last batch
    into power-of-two row counts (multiples of `row_multiple`, or of 1 for rows long enough to
    split their tokens over the devices: `multiple_at`) instead of padding it to `rows`, and
    pack rows to a length chosen from the work (`jaxeval.lm.score.shaping`); explicit bucket lists keep
    exactly their shapes.
    """

    buckets: tuple[Bucket, ...]
    fit_rows: bool = False
    row_multiple: int = 1

    def __post_init__(self) -> None:
        if not self.buckets:
            raise ValueError("a BucketSet needs at least one bucket")
        if self.row_multiple < 1:
            raise ValueError(f"row_multiple must be >= 1, got {self.row_multiple}")
        shapes = [(b.length, b.points) for b in self.buckets]
        if shapes != sorted(set(shapes)):
            raise ValueError(f"buckets must be sorted by (T, K) and unique: {shapes}")

    def __len__(self) -> int:
        return len(self.buckets)

    def __iter__(self):
        return iter(self.buckets)

    @property
    def max_length(self) -> int:
        return self.buckets[-1].length

    def lengths(self) -> tuple[int, ...]:
        """The distinct row lengths T, ascending."""
        return tuple(sorted({b.length for b in self.buckets}))

    def multiple_at(self, length: int) -> int:
        """What batches of rows of T = `length` tokens are a multiple of (`row_multiple_at`)."""
        return row_multiple_at(length, self.row_multiple)

    @functools.cached_property
    def _max_points(self) -> dict[int, int]:
        top: dict[int, int] = {}
        for b in self.buckets:
            top[b.length] = max(top.get(b.length, 0), b.points)
        return top

    def max_points(self, length: int) -> int:
        """The largest K among buckets of exactly this T (what a row of that length may score)."""
        try:
            return self._max_points[length]
        except KeyError:
            raise ValueError(f"no bucket has T = {length}") from None

    def row_length_for(self, tokens: int, points: int) -> int:
        """T of the smallest bucket that fits a row holding `tokens` tokens and `points` points."""
        return self.pick(tokens, points).length

    def pick(self, tokens: int, points: int) -> Bucket:
        """The smallest bucket (by T, then K) that fits; raises if none does."""
        for b in self.buckets:
            if b.fits(tokens, points):
                return b
        raise ValueError(
            f"no bucket fits a row of {tokens} tokens and {points} score points: {self.buckets}"
        )


def _round_rows(budget: int, length: int, multiple: int) -> int:
    """B = budget // T rounded down to a multiple of the batch devices (at least one multiple).
    A bucket's last batch may hold fewer (`shaping.shape_batches`): for rows that split their
    tokens over the devices (`row_multiple_at`), fewer than one a device, down to a lone row."""
    rows = max(1, budget // length)
    return max(multiple, rows // multiple * multiple)


def row_multiple_at(length: int, multiple: int) -> int:
    """What a batch of rows of T = `length` tokens must be a multiple of: the batch devices
    (`multiple`), or 1 when rows that do not divide over them split their tokens instead
    (`models.attention.sequence.tokens_split`: T a multiple of 2 x devices x 128)."""
    return 1 if tokens_split(length, multiple) else multiple


def make_buckets(
    *,
    max_length: int,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    lengths: Sequence[int] | None = None,
    point_fractions: Sequence[float] = DEFAULT_POINT_FRACTIONS,
    row_multiple: int = 1,
    min_length: int = DEFAULT_MIN_LENGTH,
) -> BucketSet:
    """Builds the bucket grid: lengths x point fractions, B = token_budget // T (a multiple of row_multiple).

    `lengths` defaults to powers of two from `min_length` up to the first one >= max_length, the last
    replaced by max_length itself (rounded up to a multiple of 8). `row_multiple` is the number of
    devices the batch is split over, so that every shard gets whole rows.
    """
    if max_length < 1:
        raise JaxevalError(f"max_length must be positive, got {max_length}", field="max_length")
    if lengths is None:
        top = -(-max_length // 8) * 8
        lengths_list = []
        t = min(min_length, top)
        while t < top:
            lengths_list.append(t)
            t *= 2
        lengths_list.append(top)
    else:
        lengths_list = sorted({int(t) for t in lengths})
        if lengths_list[-1] < max_length:
            raise JaxevalError(
                f"the largest bucket length {lengths_list[-1]} is below the model's max_length {max_length}",
                field="buckets",
                hint="add a bucket length >= max_length, or lower max_length (requests are truncated to it)",
            )
    return _grid(lengths_list, point_fractions, token_budget, row_multiple, fit_rows=False)


def _grid(
    lengths: Sequence[int],
    point_fractions: Sequence[float],
    token_budget: int,
    row_multiple: int,
    *,
    fit_rows: bool,
) -> BucketSet:
    """Every (length, points) pair: points = fraction * length, at least 8, at most the length."""
    shapes = set()
    for t in lengths:
        for f in point_fractions:
            if not 0 < f <= 1:
                raise JaxevalError(f"point fractions must be in (0, 1], got {f}", field="buckets")
            shapes.add((t, max(8, min(t, int(round(t * f))))))
    return BucketSet(
        buckets=tuple(
            Bucket(length=t, points=k, rows=_round_rows(token_budget, t, row_multiple))
            for t, k in sorted(shapes)
        ),
        fit_rows=fit_rows,
        row_multiple=row_multiple,
    )


def grid_lengths(max_length: int, *, min_length: int = FIT_MIN_LENGTH, steps: int = 4) -> list[int]:
    """Row lengths `steps` per octave from `min_length` up to max_length (rounded up to 8).

        grid_lengths(1000)  -> [32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384,
                                448, 512, 640, 768, 896, 1000]   (1000 is max_length rounded to 8)

    A row holding one unit of n tokens then wastes under 1/5 of its length (n = 1.25 * 2^k + 1 goes
    to 1.5 * 2^k); packing fills most of that.
    """
    top = -(-max_length // 8) * 8
    out = set()
    base = min_length
    while base < top:
        for q in range(steps, 2 * steps):
            t = base * q // steps
            if t < top:
                out.add(-(-t // 8) * 8)
        base *= 2
    out.add(top)
    return sorted(out)


def fitted_buckets(
    *,
    max_length: int,
    token_budget: int,
    row_multiple: int = 1,
    point_fractions: Sequence[float] = FIT_POINT_FRACTIONS,
    min_length: int = FIT_MIN_LENGTH,
) -> BucketSet:
    """The default grid: `grid_lengths` x point fractions, rows fitted to the work (`fit_rows`).

    The grid is large (about 4 lengths per octave x 3 point counts) but nothing compiles until a
    plan uses a shape, and plans use few (`jaxeval.lm.score.shaping` merges rare shapes away while
    padding efficiency stays above its floor).

        fitted_buckets(max_length=8192, token_budget=8192)
        -> (T=32, K=8, B=256), (T=32, K=16, B=256), (T=32, K=32, B=256), (T=40, K=8, B=204), ...,
           (T=8192, K=1024, B=1), (T=8192, K=4096, B=1), (T=8192, K=8192, B=1)
    """
    if max_length < 1:
        raise JaxevalError(f"max_length must be positive, got {max_length}", field="max_length")
    lengths = grid_lengths(max_length, min_length=min_length)
    return _grid(lengths, point_fractions, token_budget, row_multiple, fit_rows=True)


def parse_buckets(
    spec: str | Sequence[int] | Sequence[tuple[int, int]] | BucketSet | None, **kwargs
) -> BucketSet:
    """`buckets=` as the user gives it: None (defaults), "256,1024,2048" (lengths), a list of lengths,
    a list of `(T, K)` pairs, or a ready `BucketSet`."""
    if isinstance(spec, BucketSet):
        return spec
    if spec is None:
        return fitted_buckets(
            **{
                k: v
                for k, v in kwargs.items()
                if k in ("max_length", "token_budget", "row_multiple")
            }
        )
    if isinstance(spec, str):
        try:
            spec = [int(x) for x in spec.replace(";", ",").replace(" ", ",").split(",") if x]
        except ValueError:
            raise JaxevalError(
                f"cannot parse buckets={spec!r}",
                field="buckets",
                hint="give lengths like 256,1024,2048",
            ) from None
    items = list(spec)
    if items and isinstance(items[0], (tuple, list)):
        budget = kwargs.get("token_budget", DEFAULT_TOKEN_BUDGET)
        multiple = kwargs.get("row_multiple", 1)
        pairs = sorted({(int(t), int(k)) for t, k in items})
        if pairs[-1][0] < kwargs["max_length"]:
            raise JaxevalError(
                f"the largest bucket length {pairs[-1][0]} is below max_length {kwargs['max_length']}",
                field="buckets",
            )
        return BucketSet(
            buckets=tuple(
                Bucket(length=t, points=k, rows=_round_rows(budget, t, multiple)) for t, k in pairs
            ),
            row_multiple=multiple,
        )
    return make_buckets(lengths=[int(x) for x in items], **kwargs)
