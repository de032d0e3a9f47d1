"""Scalars for a training loop's logger: one flat name per metric, written against the step.

    results["results"] = {
        "arc_easy": {"alias": "arc_easy", "acc,none": 0.5, "acc_stderr,none": 0.05},
        "gsm8k": {"exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": "N/A"},
    }
    flatten_results(results)
    -> {"eval/arc_easy/acc": 0.5, "eval/arc_easy/acc_stderr": 0.05,
        "eval/gsm8k/exact_match/strict-match": 0.25}

A metric key is lm-eval's `metric,filter`; the filter becomes a last path part unless it is
`none`. Text values (the alias, an "N/A" stderr) and NaN are left out; so are `name` and
`sample_len`.
Groups are in `results["results"]` too, so a group's score is flattened like a task's.

    logger = TensorBoardLogger("runs/exp1")            # pip install "jaxeval[tensorboard]"
    logger = WandbStepLogger(project="my-run")          # pip install "jaxeval[wandb]"
    for step in ...:
        results = jaxeval.simple_evaluate(model=lm, tasks=[...])
        logger.log_results(results, step=step)
    logger.close()
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.trackers.wandb import load_wandb

_SKIPPED = ("alias", "name", "sample_len")


def flatten_results(results: dict[str, Any], prefix: str = "eval") -> dict[str, float]:
    """`{"<prefix>/<task>/<metric>[/<filter>]": value}` for every numeric metric (see above)."""
    flat: dict[str, float] = {}
    for task, entry in results.get("results", {}).items():
        for key, value in entry.items():
            if key in _SKIPPED or isinstance(value, bool):
                continue
            if not isinstance(value, numbers.Real) or math.isnan(value):
                continue
            metric, _, flt = key.partition(",")
            parts = [prefix, task, metric] if prefix else [task, metric]
            if flt and flt != "none":
                parts.append(flt)
            flat["/".join(parts)] = float(value)
    return flat


class TensorBoardLogger:
    """Writes `flatten_results` as TensorBoard scalars (event files under `logdir`), per step."""

    def __init__(self, logdir: str, *, prefix: str = "eval"):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise JaxevalError(
                "TensorBoard event files need the tensorboardX package",
                hint='pip install "jaxeval[tensorboard]"',
            ) from None
        self.prefix = prefix
        self.writer = SummaryWriter(logdir=logdir)
        self.logdir = self.writer.logdir

    def log_results(self, results: dict[str, Any], *, step: int) -> dict[str, float]:
        """Writes one scalar per metric at `step`; returns what it wrote."""
        return self.log_scalars(flatten_results(results, self.prefix), step=step)

    def log_scalars(self, values: dict[str, float], *, step: int) -> dict[str, float]:
        """Any other scalars at `step` (the training loss, say)."""
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()
        return values

    def close(self) -> None:
        self.writer.close()


class WandbStepLogger:
    """Logs `flatten_results` to a Weights & Biases run at the training step.

    With `run=None` it uses the active run (`wandb.run`), or starts one with `init` (the keyword
    arguments of `wandb.init`); a run it started, it finishes on `close()`.
    """

    def __init__(self, run: Any = None, *, prefix: str = "eval", **init: Any):
        wandb = load_wandb()
        self.prefix = prefix
        self.owns_run = run is None and wandb.run is None
        self.run = run or wandb.run or wandb.init(**init)

    def log_results(self, results: dict[str, Any], *, step: int) -> dict[str, float]:
        return self.log_scalars(flatten_results(results, self.prefix), step=step)

    def log_scalars(self, values: dict[str, float], *, step: int) -> dict[str, float]:
        self.run.log(values, step=step)
        return values

    def close(self) -> None:
        if self.owns_run:
            self.run.finish()
