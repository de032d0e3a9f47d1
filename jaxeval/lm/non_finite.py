"""The error for scored log-likelihoods that are NaN or infinite: it names the first such request.

non_finite_error(np.array([-1.2, np.nan]), lambda i: {"task": "arc_easy", "doc": 7, "request": 1})
-> JaxevalError: task 'arc_easy', field 'dtype', document 7: the model scored a non-finite
   log-likelihood (nan) for request 1 (1 of 2 requests in this call are non-finite)
   What to do: ... run again with dtype=float32 ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from jaxeval.errors import JaxevalError


def request_where(req: Any) -> dict[str, Any]:
    """Where a request comes from: its task, document id and index among the document's requests."""
    return {
        "task": getattr(req, "task_name", None),
        "doc": getattr(req, "doc_id", None),
        "index": getattr(req, "idx", None),
    }


def non_finite_error(ll: np.ndarray, describe: Callable[[int], dict[str, Any]] | None) -> Exception:
    """The error for scored log-likelihoods `ll` [R] holding NaN or infinity: it names the first
    such request (position `i` in the call; `describe(i)`: its task, document, index among the
    document's requests, rolling window) and how many there are."""
    bad = np.flatnonzero(~np.isfinite(ll))
    first = int(bad[0])
    where = describe(first) if describe is not None else {}
    said = f"request {where.get('request', first)} of this call"
    details = []
    if where.get("index") is not None:
        details.append(f"index {where['index']} among its document's requests")
    if where.get("window") is not None:
        details.append(f"rolling window {where['window']}")
    if details:
        said += f" ({', '.join(details)})"
    return JaxevalError(
        f"the model scored a non-finite log-likelihood ({float(ll[first])}) for {said}; "
        f"{len(bad)} of {len(ll)} scored requests are non-finite",
        task=where.get("task"),
        doc=where.get("doc"),
        field="dtype",
        hint="the activations overflowed or the weights hold NaN/inf: run again with "
        "dtype=float32 in --model_args (float16 overflows most often), and check the checkpoint",
    )
