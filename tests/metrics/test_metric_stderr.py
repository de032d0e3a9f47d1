"""Standard errors equal lm-eval 0.4.13's: closed forms and the seeded bootstrap, bit for bit."""

import math
import random

import pytest

from jaxeval.metrics import (
    AGGREGATIONS,
    acc_all_stderr,
    bootstrap_stderr,
    mean_stderr,
    sample_stddev,
    stderr_for_aggregation,
)

lm_metrics = pytest.importorskip("lm_eval.api.metrics")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_rng = random.Random(1234)
LLS = [_rng.uniform(-4.0, -0.1) for _ in range(60)]
ACCS = [_rng.randint(0, 1) for _ in range(80)]
PAIRS = [(_rng.randint(0, 1), _rng.randint(0, 1)) for _ in range(40)]
MULTI = [(_rng.randint(0, 2), _rng.randint(0, 2)) for _ in range(40)]
NANS = [_rng.choice([float("nan"), _rng.random()]) for _ in range(30)]
TRANSLATIONS = [
    ("the cat sat on the mat", "the cat sat on a mat"),
    ("he read the book", "he read a book"),
    ("it is raining today", "it rains today"),
    ("good morning to you", "good morning"),
]
MULTIRC = [
    (
        _rng.random() < 0.7,
        {"idx": {"paragraph": _rng.randint(0, 2), "question": _rng.randint(0, 6)}, "label": 1},
    )
    for _ in range(50)
]

# aggregation name -> (lm-eval's aggregation function, data)
LM_AGGREGATIONS = {
    "mean": (lm_metrics.mean, ACCS),
    "median": (lm_metrics.median, LLS),
    "nanmean": (lm_metrics.nanmean, NANS),
    "perplexity": (lm_metrics.perplexity, LLS),
    "f1": (lm_metrics.f1_score, PAIRS),
    "matthews_corrcoef": (lm_metrics.matthews_corrcoef, MULTI),
    "bleu": (lm_metrics.bleu, TRANSLATIONS),
    "chrf": (lm_metrics.chrf, TRANSLATIONS),
    "chrf++": (lm_metrics.chrfpp, TRANSLATIONS),
    "ter": (lm_metrics.ter, TRANSLATIONS),
    "weighted_perplexity": (lm_metrics.weighted_perplexity, [(x, 3) for x in LLS]),
    "bits_per_byte": (lm_metrics.bits_per_byte, [(x, 3) for x in LLS]),
    "brier_score": (lm_metrics.brier_score, [(0, [0.2, 0.8]), (1, [0.4, 0.6])]),
    "bypass": (lm_metrics.bypass_agg, ACCS),
    "acc_all": (lm_metrics.acc_all, MULTIRC),
}


@pytest.fixture(autouse=True)
def _single_process(monkeypatch):
    monkeypatch.setenv("DISABLE_MULTIPROC", "1")  # lm-eval's pool would fork: see below


def test_closed_forms_equal_lm_eval():
    for xs in (ACCS, LLS, [0.5, 0.25]):
        assert sample_stddev(xs) == lm_metrics.sample_stddev(xs)
        assert mean_stderr(xs) == lm_metrics.mean_stderr(xs)
    assert acc_all_stderr(MULTIRC) == lm_metrics.acc_all_stderr(MULTIRC)


def test_closed_forms_hand_worked():
    assert sample_stddev([1.0, 3.0]) == math.sqrt(2.0)
    assert mean_stderr([1, 0, 1, 0]) == math.sqrt(1 / 3) / 2
    assert AGGREGATIONS.get("mean")(ACCS) == sum(ACCS) / len(ACCS)


def test_every_aggregation_covered():
    assert set(LM_AGGREGATIONS) == set(AGGREGATIONS.names())


@pytest.mark.parametrize("name", sorted(LM_AGGREGATIONS))
def test_stderr_for_aggregation_equals_lm_eval(name):
    lm_agg, xs = LM_AGGREGATIONS[name]
    iters = 300  # not a multiple of the chunk for nothing: 1 chunk of 300
    capped = min(iters, 100) if name in ("bleu", "chrf", "chrf++", "ter") else iters
    expected_fn = lm_metrics.stderr_for_metric(lm_agg, capped)
    got_fn = stderr_for_aggregation(name, iters)
    if name == "acc_all":  # not an lm-eval aggregation; lm-eval pairs the acc_all fn with this
        assert got_fn is acc_all_stderr
    assert (got_fn is None) == (expected_fn is None), name
    if got_fn is not None:
        assert got_fn(xs) == expected_fn(xs), name


@pytest.mark.parametrize(
    "name,iters",
    [
        *[(n, i) for n in ("median", "perplexity") for i in (1000, 10000)],
        *[(n, 1000) for n in ("f1", "matthews_corrcoef")],
    ],
)
def test_bootstrap_equals_lm_eval(name, iters):
    # lm-eval runs single-process here (DISABLE_MULTIPROC): its pool gives the same numbers but
    # forks, which is unsafe once JAX threads run in the test session. f1 and mcc run one chunk
    # only: every replicate goes through sklearn (10,000 took 66-72 s each in a 2-core suite), and
    # ten chunks run the same code as one, which median and perplexity check at 10,000.
    lm_agg, xs = LM_AGGREGATIONS[name]
    expected = lm_metrics.bootstrap_stderr(lm_agg, xs, iters)
    assert bootstrap_stderr(AGGREGATIONS.get(name), xs, iters) == expected


@pytest.mark.parametrize("iters", [1, 7, 2500])
def test_bootstrap_chunking_edge_cases(iters):
    # 2500 -> chunk 1000, two chunks (500 dropped); 7 -> one chunk of 7.
    if iters == 1:
        with pytest.raises(ZeroDivisionError):  # one replicate has no sample stddev
            bootstrap_stderr(AGGREGATIONS.get("median"), LLS, iters)
        return
    expected = lm_metrics.bootstrap_stderr(lm_metrics.median, LLS, iters)
    assert bootstrap_stderr(AGGREGATIONS.get("median"), LLS, iters) == expected


def test_caps_and_switches():
    lm_bleu = lm_metrics.bleu
    # The cap follows the metric name: a metric named bleu caps at 100, another name does not.
    assert stderr_for_aggregation("bleu", 250)(TRANSLATIONS) == lm_metrics.bootstrap_stderr(
        lm_bleu, TRANSLATIONS, 100
    )
    uncapped = stderr_for_aggregation("bleu", 250, metric_name="my_bleu")(TRANSLATIONS)
    assert uncapped == lm_metrics.bootstrap_stderr(lm_bleu, TRANSLATIONS, 250)
    capped = stderr_for_aggregation("median", 250, metric_name="ter")(LLS)
    assert capped == lm_metrics.bootstrap_stderr(lm_metrics.median, LLS, 100)
    # bootstrap_iters <= 0 switches every stderr off, even the closed form.
    assert stderr_for_aggregation("mean", 0) is None
    assert stderr_for_aggregation("median", -1) is None
    # A registered aggregation passed as a callable counts; a custom callable gets none.
    assert stderr_for_aggregation(AGGREGATIONS.get("mean"), 10) is mean_stderr
    assert stderr_for_aggregation(lambda xs: 0.0, 10) is None
    assert stderr_for_aggregation("no_such_aggregation", 10) is None
