"""`jaxeval plan --topology` names the compiler its figures come from (they change with libtpu)."""

import importlib.metadata

from jaxeval.plan.report import TopologyPlan, compiler_versions
from jaxeval.plan.topology import get_topology


def test_the_table_and_json_name_libtpu_and_jax():
    expected = f"jax {importlib.metadata.version('jax')}"
    assert compiler_versions().startswith("libtpu ") and compiler_versions().endswith(expected)
    plan = TopologyPlan(
        topology=get_topology("v5e-8"), model_type="llama", dtype="bfloat16", attention="tpu",
        mesh={"fsdp": 8}, parameters=10**8, param_bytes=10**6, token_budget=1024, executables=(),
    )  # fmt: skip
    assert plan.table().splitlines()[0].endswith(f"; compiled by {compiler_versions()}")
    assert plan.to_json()["compiler"] == compiler_versions()
