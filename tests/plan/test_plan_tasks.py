"""`jaxeval plan --topology T --tasks ...` (`jaxeval.plan.tasks`): the executables it plans are the
ones a run of the same tasks compiles."""

from __future__ import annotations

import pytest

from tests.helpers.tiny_models import tiny_checkpoint

TASKS = ["arc_easy", "gsm8k"]


@pytest.fixture(scope="module")
def checkpoint() -> str:
    return tiny_checkpoint("llama")


def _run_keys(path: str, data_root, model_args: dict, **evaluate) -> set:
    """The keys of every executable a CPU run of `TASKS` compiled (scorer's and generator's)."""
    import jaxeval
    from jaxeval.api.task_manager import TaskManager
    from jaxeval.lm.jax_lm import JaxLM

    lm = JaxLM(pretrained=path, **model_args)
    jaxeval.simple_evaluate(
        model=lm,
        tasks=TASKS,
        task_manager=TaskManager(data_dir=str(data_root)),
        bootstrap_iters=0,
        **evaluate,
    )
    keys = set(lm.scorer.executables.keys())
    if lm.generator is not None:
        keys |= set(lm.generator.executables.keys())
    return lm, keys


def _plan_keys(lm, path: str, data_root, model_args: dict, **evaluate) -> tuple:
    from jaxeval.lm.generate.sizing import free_bytes_per_device
    from jaxeval.lm.model_config import JaxLMConfig
    from jaxeval.lm.score.budget import device_free_bytes
    from jaxeval.plan.tasks import record_run

    config = JaxLMConfig.from_kwargs({"pretrained": path, **model_args})
    setup, record = record_run(
        config,
        lm.loaded.spec,
        lm.loaded.hf_config,
        lm.mesh,
        TASKS,
        free_bytes=device_free_bytes(lm.mesh),
        engine_free_bytes=free_bytes_per_device(lm.mesh),
        data_dir=str(data_root),
        **evaluate,
    )
    return setup, record, set(record.uses)


@pytest.mark.parametrize(
    ("limit", "model_args"),
    [
        pytest.param(4, {"max_length": 512}, id="one-admission"),
        # several admissions of long prompts, one at a time (90 s on 2 cores)
        pytest.param(
            12, {"max_length": 2048, "gen_batch_size": 8}, marks=pytest.mark.slow, id="refills"
        ),
    ],
)
def test_planned_executables_are_the_runs(checkpoint, data_root, limit, model_args):
    model_args = {"dtype": "float32", **model_args}
    evaluate = {"limit": limit, "gen_kwargs": "max_gen_toks=8"}
    lm, run = _run_keys(checkpoint, data_root, model_args, **evaluate)
    _, record, planned = _plan_keys(lm, checkpoint, data_root, model_args, **evaluate)
    assert planned == run
    assert any(u.kind == "score" for u in record.uses.values())
    assert any(u.kind == "decode" for u in record.uses.values())


@pytest.mark.parametrize("family", ["llama", "gemma2", "qwen2_moe"])
def test_the_plan_and_the_run_decide_alike(family, data_root):
    """`plan` and a run on the same arguments: the same token budget, bucket grid, point cost,
    engine rows and executables (dense, sliding-window and Mixture-of-Experts families)."""
    path = tiny_checkpoint(family)
    model_args = {"dtype": "float32", "max_length": 256}
    evaluate = {"limit": 2, "gen_kwargs": "max_gen_toks=4"}
    lm, run = _run_keys(path, data_root, model_args, **evaluate)
    setup, record, planned = _plan_keys(lm, path, data_root, model_args, **evaluate)
    assert setup.token_budget == lm.token_budget
    assert setup.buckets == lm.buckets
    assert setup.point_cost == lm.point_cost and setup.max_length == lm.max_length
    (init,) = [u.key for u in record.uses.values() if u.kind == "init"]
    assert init.rows == lm.generator.stats["engine_rows"]
    assert planned == run


def test_the_plan_compiles_for_a_tpu_slice(checkpoint, data_root):
    """The same tasks on a v5e-8 (libtpu on this host): every executable compiles and fits once,
    the rows add up to the total, the table and the JSON say the same."""
    from jaxeval.plan.tasks import HOST_S_PER_M_TOKENS, plan_tasks
    from jaxeval.plan.topology import libtpu_available

    if not libtpu_available():
        pytest.skip("libtpu is not installed: nothing compiles for a TPU slice here")
    plan = plan_tasks(
        f"pretrained={checkpoint},max_length=512",
        "v5e-8",
        TASKS,
        data_dir=str(data_root),
        limit=4,
        gen_kwargs="max_gen_toks=8",
        count_layers=False,
    )
    assert plan.ok
    assert set(plan.compiled) == set(plan.uses)
    rows = {r["task"]: r for r in plan.rows()}
    assert list(rows) == [*TASKS, "total"]
    total = rows.pop("total")
    assert (
        total["executables"] == len(plan.compiled) == sum(r["executables"] for r in rows.values())
    )
    assert total["requests"] == 4 * 4 + 4  # ARC-Easy: 4 choices a document
    assert total["device_roofline_s"] == pytest.approx(
        sum(r["device_roofline_s"] for r in rows.values()), rel=1e-9
    )
    assert total["device_roofline_s"] > 0
    lo, hi = total["device_s_range"]
    assert lo == pytest.approx(total["device_roofline_s"] / 0.6)
    assert hi == pytest.approx(total["device_roofline_s"] / 0.4)
    assert total["host_s"] == pytest.approx(total["tokens"] / 1e6 * HOST_S_PER_M_TOKENS)
    assert plan.to_json()["tasks"][-1] == total
    assert "| **total** | 20 |" in plan.table()


def test_a_directory_without_a_tokenizer_says_how_to_give_one(tmp_path):
    """configs/models/llama-3-8b holds a config.json only: the error names tokenizer=DIR."""
    from jaxeval.errors import JaxevalError
    from jaxeval.lm.model_config import JaxLMConfig
    from jaxeval.lm.setup import run_tokenizer

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(JaxevalError, match="no tokenizer files") as raised:
        run_tokenizer(JaxLMConfig.from_kwargs({"pretrained": str(tmp_path)}), path=str(tmp_path))
    assert "tokenizer=DIR" in str(raised.value.hint)


def test_the_flags_tasks_sets_are_refused_with_it(capsys):
    from jaxeval.cli.plan import PlanCommand

    argv = ["--model_args", "pretrained=x", "--topology", "v5e-8", "--tasks", "arc_easy"]
    with pytest.raises(SystemExit) as raised:
        PlanCommand().parse_args([*argv, "--lengths", "2048"])
    assert raised.value.code == 2
    assert "--lengths: not with --tasks" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        PlanCommand().parse_args(["--model_args", "pretrained=x", "--tasks", "arc_easy"])
    assert "--tasks: only with --topology" in capsys.readouterr().err
