"""Every executable compiles with its platform's options (`jaxeval.lm.executables.PLATFORM_OPTIONS`).

On a TPU slice an fsdp layer's matmul (rows over the 8 chips, the weight's rows split over them
too) compiles as all-gather + one matmul, not as XLA's windowed einsum (a loop of partial matmuls
with collective permutes); the options reach the compiler through `Executables`, for the planner
and a run alike, and an instance's own options still go on top. CPU jobs get none. libtpu is a
test dependency (as for tests/plan/test_tpu_plan.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxeval.lm.executables import PLATFORM_OPTIONS, Executables, Job, job_platforms
from tests.helpers.tpu import tpu_mesh

pytest.importorskip("libtpu")

ROWS, WIDTH, FFN = 8192, 2048, 4096  # large enough for the compiler to choose a windowed loop


def matmul_job() -> Job:
    mesh = tpu_mesh("v5e-8")
    x = jax.ShapeDtypeStruct((ROWS, WIDTH), jnp.bfloat16, sharding=NamedSharding(mesh, P("fsdp")))
    w = jax.ShapeDtypeStruct((WIDTH, FFN), jnp.bfloat16, sharding=NamedSharding(mesh, P("fsdp")))
    out = NamedSharding(mesh, P("fsdp"))
    return Job(("mlp", ROWS), lambda a, b: a @ b, (x, w), out_shardings=out)


def test_tpu_jobs_compile_without_windowed_einsum():
    job = matmul_job()
    assert job_platforms(job) == {"tpu"}
    exe = Executables("test")
    assert exe.options_for(job) == PLATFORM_OPTIONS["tpu"]
    text = exe.get(job).as_text()
    assert "windowed_dot_general" not in text and "collective-permute" not in text
    assert "all-gather" in text
    # the compiler's own choice, for contrast: the windowed loop
    plain = Executables("test")
    plain.options_for = lambda job: None
    assert "windowed_dot_general" in plain.get(matmul_job()).as_text()


def test_cpu_jobs_get_no_options():
    cpu = jax.devices("cpu")[0]
    x = jax.device_put(np.ones((4, 4), np.float32), cpu)
    job = Job(("cpu",), lambda a: a + 1, (x,))
    assert job_platforms(job) == {"cpu"}
    assert Executables("test").options_for(job) is None
    assert Executables("test", compiler_options={"a": 1}).options_for(job) == {"a": 1}
