"""Several JAX processes as ONE logical evaluator: start-up, who writes, and plan agreement.

    jaxeval.platform.distributed.initialize()          # before anything touches JAX devices
    lm = JaxLM(pretrained=..., mesh="data")   # one Mesh over the devices of every process
    jaxeval.simple_evaluate(lm, ...)          # results on process 0, None elsewhere

Every process builds the same request plan (same documents, same few-shot draws, same packed
batches) from the same inputs; each feeds only its addressable shards of every batch
(`jaxeval.platform.mesh.put_global`); the kernels run SPMD over the global mesh and return small replicated
outputs that every process can read. Only process 0 writes files and prints results. Documents are
never strided over processes as lm-eval strides them over ranks, so few-shot draws never depend on
the process count.

    2 processes x 2 devices:  process 0 -> devices 0, 1     process 1 -> devices 2, 3
    batch rows [B=8]:          rows 0-1 | 2-3 (process 0)    rows 4-5 | 6-7 (process 1)
    outputs (loglik [S]):      replicated on all 4 devices, read on both processes

Start-up is driven by arguments, else by environment variables (`JAXEVAL_COORDINATOR=host:port`,
`JAXEVAL_NUM_PROCESSES`, `JAXEVAL_PROCESS_ID`, `JAXEVAL_LOCAL_DEVICE_IDS=0,1`); with neither,
`jax.distributed.initialize()` auto-detects the cluster (TPU pods, SLURM, ...). CPU processes talk
through gloo collectives.

Because the processes must issue the same kernels in the same order, a plan that differs between
processes would hang or corrupt a run: `check_same` compares a digest of each plan across processes
and fails loudly instead.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from jaxeval.errors import JaxevalError

log = logging.getLogger(__name__)

ENV_COORDINATOR = "JAXEVAL_COORDINATOR"
ENV_NUM_PROCESSES = "JAXEVAL_NUM_PROCESSES"
ENV_PROCESS_ID = "JAXEVAL_PROCESS_ID"
ENV_LOCAL_DEVICE_IDS = "JAXEVAL_LOCAL_DEVICE_IDS"


def requested_by_env() -> bool:
    """True when the environment asks for a multi-process run (`JAXEVAL_COORDINATOR` set)."""
    return bool(os.environ.get(ENV_COORDINATOR))


def _env_int(name: str) -> int | None:
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise JaxevalError(f"{name}={text!r} is not an integer", field=name) from None


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: Sequence[int] | None = None,
    *,
    cpu_collectives: str = "gloo",
    initialization_timeout: int = 300,
    shutdown_timeout: int = 3600,
) -> None:
    """`jax.distributed.initialize` with jaxeval's environment variables; idempotent.

    Call it before anything touches JAX devices (`jax.devices()`, a mesh, a model). Arguments win
    over the environment; with neither, JAX auto-detects the cluster (TPU pods, SLURM, MPI).
    `shutdown_timeout` is how long a process that finished early (all but process 0, which still
    aggregates, bootstraps and writes) waits at exit for the others.
    """
    import jax

    if is_initialized():
        return
    coordinator_address = coordinator_address or os.environ.get(ENV_COORDINATOR) or None
    num_processes = num_processes if num_processes is not None else _env_int(ENV_NUM_PROCESSES)
    process_id = process_id if process_id is not None else _env_int(ENV_PROCESS_ID)
    if local_device_ids is None and os.environ.get(ENV_LOCAL_DEVICE_IDS, "").strip():
        text = os.environ[ENV_LOCAL_DEVICE_IDS]
        try:
            local_device_ids = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise JaxevalError(
                f"{ENV_LOCAL_DEVICE_IDS}={text!r} is not a comma-separated list of integers",
                field=ENV_LOCAL_DEVICE_IDS,
            ) from None
    if coordinator_address and (num_processes is None or process_id is None):
        raise JaxevalError(
            "a coordinator address needs the number of processes and this process's id",
            field=ENV_NUM_PROCESSES if num_processes is None else ENV_PROCESS_ID,
            hint=f"set {ENV_NUM_PROCESSES} and {ENV_PROCESS_ID} (or pass num_processes, process_id)",
        )
    if cpu_collectives:  # CPU devices of different processes exchange data through gloo
        jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    kwargs: dict[str, Any] = {"initialization_timeout": initialization_timeout}
    if "shutdown_timeout_seconds" in inspect.signature(jax.distributed.initialize).parameters:
        kwargs["shutdown_timeout_seconds"] = shutdown_timeout
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_device_ids,
        **kwargs,
    )
    log.info(
        "process %d of %d: %d local of %d devices",
        jax.process_index(),
        jax.process_count(),
        jax.local_device_count(),
        jax.device_count(),
    )


def is_initialized() -> bool:
    """Whether `jax.distributed` is already up in this process."""
    import jax

    is_init = getattr(jax.distributed, "is_initialized", None)
    if is_init is not None:
        return bool(is_init())
    from jax._src import distributed as _dist  # older JAX: no public query

    return _dist.global_state.client is not None


def process_index() -> int:
    import jax

    return jax.process_index()


def process_count() -> int:
    import jax

    return jax.process_count()


def is_main_process() -> bool:
    """Process 0: the one that writes files and prints results."""
    return process_index() == 0


def barrier(name: str) -> None:
    """Blocks until every process reaches the barrier `name` (no-op with one process)."""
    if process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


# ---- small host values across processes ---------------------------------------------------------
def agree_min(value: int) -> int:
    """The smallest of every process's `value` (e.g. a memory-derived token budget)."""
    if process_count() == 1:
        return int(value)
    from jax.experimental import multihost_utils

    return int(np.min(multihost_utils.process_allgather(np.asarray([value], np.int64))))


def broadcast_json(obj: Any = None) -> Any:
    """Process 0's `obj` (JSON-serializable) on every process; other processes' `obj` is ignored."""
    if process_count() == 1:
        return obj
    from jax.experimental import multihost_utils

    data = json.dumps(obj).encode("utf-8") if is_main_process() else b""
    n = int(multihost_utils.broadcast_one_to_all(np.asarray([len(data)], np.int32))[0])
    buf = np.zeros(max(n, 1), np.uint8)
    if is_main_process():
        buf[:n] = np.frombuffer(data, np.uint8)
    out = np.asarray(multihost_utils.broadcast_one_to_all(buf), np.uint8)
    return json.loads(out[:n].tobytes().decode("utf-8"))


def fingerprint(arrays: Iterable[Any]) -> bytes:
    """sha256 over the dtypes, shapes and bytes of host arrays (a plan's batches)."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.digest()


def check_same(what: str, digest: bytes) -> None:
    """Raises on every process when the processes' digests of `what` differ (no-op alone)."""
    if process_count() == 1:
        return
    from jax.experimental import multihost_utils

    mine = np.frombuffer(digest, np.uint8)
    everyone = np.asarray(
        multihost_utils.process_allgather(mine)
    )  # one row of 32 bytes per process
    differs = [p for p in range(everyone.shape[0]) if not np.array_equal(everyone[p], everyone[0])]
    if differs:
        raise JaxevalError(
            f"the {what} built on process(es) {differs} differs from process 0's",
            hint="every process must see the same tasks, data, tokenizer and arguments",
        )
