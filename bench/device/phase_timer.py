"""Runs `lm_eval` or `jaxeval` exactly as its command line does, timing its request methods.

    PHASE_TIMES=times.jsonl python bench/device/phase_timer.py lm_eval --model hf ...
    PHASE_TIMES=times.jsonl python bench/device/phase_timer.py jaxeval --model hf ...

Wraps the model class's `loglikelihood`, `loglikelihood_rolling` and `generate_until` (lm-eval's
`HFLM`, jaxeval's `JaxLM`) with a wall-clock timer and appends one JSON line per call to
$PHASE_TIMES: {"method", "requests", "seconds"}. Each method returns host values, so a call's end
is its device work's end. Nothing else changes: the same CLI entry point runs the same arguments.
jaxeval's entry first hides torch from transformers, as its own command does (`jaxeval.cli.startup`).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time

METHODS = ("loglikelihood", "loglikelihood_rolling", "generate_until")


def _wrap(cls) -> None:
    path = os.environ.get("PHASE_TIMES")
    for name in METHODS:
        inner = getattr(cls, name, None)
        if inner is None:
            continue

        @functools.wraps(inner)
        def timed(self, requests, *args, _inner=inner, _name=name, **kwargs):
            start = time.perf_counter()
            out = _inner(self, requests, *args, **kwargs)
            seconds = time.perf_counter() - start
            if path:
                with open(path, "a", encoding="utf-8") as f:
                    row = {"method": _name, "requests": len(requests), "seconds": seconds}
                    f.write(json.dumps(row) + "\n")
            return out

        setattr(cls, name, timed)


def main(tool: str, argv: list[str]) -> int:
    sys.argv = [tool, *argv]
    if tool == "lm_eval":
        from lm_eval.models.huggingface import HFLM

        _wrap(HFLM)
        from lm_eval.__main__ import cli_evaluate

        cli_evaluate()
        return 0
    if tool == "jaxeval":
        from jaxeval.cli.startup import hide_torch_from_transformers

        hide_torch_from_transformers()
        from jaxeval.lm.jax_lm import JaxLM

        _wrap(JaxLM)
        from jaxeval.cli import main as jaxeval_main

        return int(jaxeval_main() or 0)
    raise SystemExit(f"unknown tool {tool!r}: lm_eval or jaxeval")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2:]))
