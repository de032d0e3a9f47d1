"""`jaxeval plan --topology v5e-8 --tasks arc_easy,gsm8k`: a run of those tasks, compiled for a TPU
slice on this host, and what it costs per task.

    jaxeval plan --topology v5e-8 --tasks arc_easy,gsm8k --data_dir D \\
        --model_args pretrained=configs/models/llama-3-8b,tokenizer=TOKENIZER_DIR

1. The run's setup (`lm.setup.run_setup`, the function `JaxLM` calls) on that slice: the model's
   arguments (`JaxLMConfig`), its tokenizer, `max_length`, the token budget the run would pick on
   the chip (`budget.run_token_budget` on the HBM left after the parameters) and its bucket grid.
2. The tasks read by the run's own code (`simple_evaluate` with a `DryRunLM` as the model,
   `jaxeval.lm.dry_run`: `JaxLM`'s request methods, recording instead of computing): documents,
   few-shot prompts, requests, tokenization, score plans and the generation engine's rounds. The result: every executable the run compiles (its key) and
   how often each task calls it.
3. Each distinct executable compiled once for the slice (`costs.compile_job`, FLOPs and bytes
   counted over every layer); one shared by several tasks is counted among the executables of the
   first task that uses it, and its calls are charged to each task that makes them.

Per task: requests, tokens (scored tokens; generation: prompt + new tokens at their budget),
executables, device seconds at the roofline (the sum over calls of `Compiled.roofline_s`; a decode
call counted per step) and as a range at 40-60% of the roofline (roofline / 0.6 .. roofline / 0.4),
host seconds at `HOST_S_PER_M_TOKENS`, and which of the two bounds the run (device at 50% of the
roofline against host).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Hashable
from typing import Any

from jaxeval.api.task_manager import TaskManager
from jaxeval.errors import JaxevalError
from jaxeval.evaluator import simple_evaluate
from jaxeval.lm.args import parse_model_args
from jaxeval.lm.dry_run import DryRunLM, Record, Use
from jaxeval.lm.generate.calls import Decode
from jaxeval.lm.model_config import JaxLMConfig
from jaxeval.lm.setup import RunSetup, run_setup, run_tokenizer
from jaxeval.models.families import spec_from_config
from jaxeval.models.runtime import make_runtime
from jaxeval.plan.costs import (
    Compiled,
    compile_job,
    layer_costs,
    sharded_abstract_params,
    step_costs,
)
from jaxeval.plan.jobs import engine_builder, param_bytes_per_chip, scoring_jobs, topology_mesh
from jaxeval.plan.memory import read_config
from jaxeval.plan.topology import Topology, get_topology

# Host seconds per million scored tokens: docs/performance.md, the warm ARC-Easy + LAMBADA run on
# 2 cores ((wall - device - compile) / scored tokens; start-up, data and model loading included)
HOST_S_PER_M_TOKENS = 9.1
# the device's share of its roofline a run reaches, low and high (the printed range)
ROOFLINE_SHARE = (0.4, 0.6)


def record_run(
    config: JaxLMConfig,
    spec: Any,
    hf_config: Any,
    mesh: Any,
    tasks: list[str],
    *,
    free_bytes: int | None,
    engine_free_bytes: int | None = None,
    tokenizer: Any = None,
    data_dir: str | None = None,
    metadata: dict[str, Any] | None = None,
    **evaluate: Any,
) -> tuple[RunSetup, Record]:
    """The run's setup on `mesh` (`lm.setup.run_setup`, as `JaxLM` calls it, on devices with
    `free_bytes` free after the parameters and `engine_free_bytes` for the generation engine,
    default `free_bytes`) and what a run of `tasks` asks of it (`lm.dry_run`); `evaluate`: limit,
    num_fewshot, gen_kwargs as the run takes them, `data_dir` the run's `--data_dir`."""
    path = str(config.pretrained)
    if tokenizer is None:
        tokenizer = run_tokenizer(config, path=path)
    setup = run_setup(
        config,
        spec=spec,
        hf_config=hf_config,
        path=path,
        tokenizer=tokenizer,
        mesh=mesh,
        free_bytes=free_bytes,
        engine_free_bytes=free_bytes if engine_free_bytes is None else engine_free_bytes,
    )
    lm = DryRunLM(setup)
    meta = metadata if metadata is not None else {"pretrained": path}
    manager = TaskManager(metadata=meta, data_dir=data_dir)
    simple_evaluate(
        model=lm, tasks=tasks, task_manager=manager, bootstrap_iters=0, log_samples=False,
        **evaluate,
    )  # fmt: skip
    return setup, lm.record


# ---- compiling ----------------------------------------------------------------------------------
def compile_uses(
    uses: dict[Hashable, Use],
    spec: Any,
    runtime: Any,
    mesh: Any,
    dtype: str,
    grid: Any,
    *,
    count_layers: bool = True,
    progress: Any = None,
) -> dict[Hashable, Compiled]:
    """Each executable of `uses` compiled once for `mesh`'s devices, FLOPs and bytes counted over
    every layer (`layer_costs`; a decode call per step, `step_costs`) unless `count_layers` is
    False; the small state pieces (init, peek, move) keep the compiler's own counts. A scoring
    key is the scorer's bucket (`Scorer.job`), an engine call's key builds its own job
    (`engine.engine_job`)."""
    params = sharded_abstract_params(spec, mesh, dtype)
    out: dict[Hashable, Compiled] = {}
    for key, use in uses.items():
        steps = None
        if use.kind == "score":
            (planned,) = scoring_jobs(spec, mesh, grid, [key])
            name, build, count = planned.name, planned.build, planned.count
        else:
            name, build = key.describe(), engine_builder(key)
            count = build
            if isinstance(key, Decode):
                steps = lambda n, key=key: engine_builder(  # noqa: E731
                    dataclasses.replace(key, steps_per_iteration=n)
                )
        if progress is not None:
            progress(f"compiling {name}")
        cost = None
        if count_layers and use.kind in ("score", "admit", "prefix", "decode"):
            try:
                if steps is not None:
                    cost = step_costs(steps, spec, runtime, mesh, dtype)
                else:
                    cost = layer_costs(count, spec, runtime, mesh, dtype)
            except Exception:  # the full compile below reports the error
                cost = None
        job = build(spec, runtime, params)
        if job.key != key:  # the dry run's key is the owner's own (`Scorer.job`, the engine's)
            raise AssertionError(f"{name}: planned as {key}, built as {job.key}")
        out[key] = compile_job(job, name=name, kind=use.kind, tokens=0, useful=0.0, cost=cost)
    return out


# ---- per task -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class TasksPlan:
    """Everything `jaxeval plan --topology T --tasks ...` prints."""

    topology: Topology
    model_type: str
    dtype: str
    max_length: int
    token_budget: int
    tasks: tuple[str, ...]
    counts: dict[str, Any]  # task -> TaskCounts
    uses: dict[Hashable, Use]
    compiled: dict[Hashable, Compiled]

    @property
    def ok(self) -> bool:
        chip = self.topology.chip
        return all(
            c.error is None and c.hbm_bytes <= chip.allowed_hbm_bytes
            for c in self.compiled.values()
        )

    def _seconds(self, use: Use, calls: float) -> float:
        c = self.compiled.get(use.key)
        return 0.0 if c is None or c.error is not None else c.roofline_s(self.topology) * calls

    def rows(self) -> list[dict[str, Any]]:
        """One dict per task, then the total (the JSON's `tasks`; the table's rows)."""
        low, high = ROOFLINE_SHARE
        out = []
        names = [t for t in self.tasks if t in self.counts] + [
            t for t in self.counts if t not in self.tasks
        ]
        for task in [*names, None]:
            if task is None:
                requests = sum(c.requests for c in self.counts.values())
                tokens = sum(c.tokens for c in self.counts.values())
                execs = len(self.uses)
                device = sum(self._seconds(u, sum(u.calls.values())) for u in self.uses.values())
            else:
                requests, tokens = self.counts[task].requests, self.counts[task].tokens
                execs = sum(u.first_task == task for u in self.uses.values())
                device = sum(self._seconds(u, u.calls.get(task, 0.0)) for u in self.uses.values())
            host = tokens / 1e6 * HOST_S_PER_M_TOKENS
            out.append(
                {
                    "task": task or "total",
                    "requests": int(requests),
                    "tokens": int(round(tokens)),
                    "executables": int(execs),
                    "device_roofline_s": device,
                    "device_s_range": [device / high, device / low],
                    "host_s": host,
                    "bound": "device" if device / (0.5 * (low + high)) >= host else "host",
                }
            )
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "topology": self.topology.name,
            "model_type": self.model_type,
            "dtype": self.dtype,
            "max_length": self.max_length,
            "token_budget": self.token_budget,
            "host_s_per_m_tokens": HOST_S_PER_M_TOKENS,
            "roofline_share": list(ROOFLINE_SHARE),
            "tasks": self.rows(),
            "executables": [
                {
                    "kind": self.uses[k].kind,
                    "first_task": self.uses[k].first_task,
                    "calls": sum(self.uses[k].calls.values()),
                    **c.summary(self.topology),
                }
                for k, c in self.compiled.items()
            ],  # fmt: skip
            "ok": self.ok,
        }

    def table(self) -> str:
        """Markdown: one line per task and a total (docs/tpu.md shows this output)."""
        topo = self.topology
        lines = [
            f"**{self.model_type}** in {self.dtype} on {topo.name}, max_length {self.max_length:,}, "
            f"token budget {self.token_budget:,}; host at {HOST_S_PER_M_TOKENS} s per million "
            "tokens; device range at 40-60% of the roofline",
            "",
            "| task | requests | tokens | executables | device s (roofline) | device s (40-60%) "
            "| host s | bound |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in self.rows():
            lo, hi = r["device_s_range"]
            name = f"**{r['task']}**" if r["task"] == "total" else r["task"]
            lines.append(
                f"| {name} | {r['requests']:,} | {r['tokens']:,} | {r['executables']} | "
                f"{_s(r['device_roofline_s'])} | {_s(lo)}-{_s(hi)} | {_s(r['host_s'])} | "
                f"{r['bound']} |"
            )
        return "\n".join(lines)


def _s(seconds: float) -> str:
    """Seconds to print: one decimal from 10 s, else three significant digits."""
    return f"{seconds:,.1f}" if seconds >= 10 else f"{seconds:.3g}"


def plan_tasks(
    model_args: str,
    topology: str,
    tasks: list[str],
    *,
    preset: str = "fsdp",
    token_budget: int | None = None,
    count_layers: bool = True,
    progress: Any = None,
    **evaluate: Any,
) -> TasksPlan:
    """The run of `tasks` with `model_args` (as `jaxeval run` takes them) compiled for the slice
    `topology` (module docstring); `evaluate`: data_dir, limit, num_fewshot, gen_kwargs."""
    args = parse_model_args(model_args)
    if token_budget is not None:
        args["token_budget"] = token_budget
    config = JaxLMConfig.from_kwargs(args)
    dtype = str(config.dtype if config.dtype not in (None, "auto") else "bfloat16")
    topo = get_topology(topology)
    mesh = topology_mesh(topo, preset)
    hf_config = read_config(str(config.pretrained))
    spec = spec_from_config(hf_config, compute_dtype=dtype)
    runtime = make_runtime(mesh, config.attention, config.experts)
    per_chip = param_bytes_per_chip(sharded_abstract_params(spec, mesh, dtype))
    if per_chip > topo.chip.allowed_hbm_bytes:
        raise JaxevalError(
            f"the parameters alone take {per_chip / (1 << 30):.2f} GiB per chip on {topo.name}",
            field="topology",
            hint="a larger slice, or dtype=bfloat16",
        )
    setup, record = record_run(
        config, spec, hf_config, mesh, tasks, free_bytes=topo.chip.allowed_hbm_bytes - per_chip,
        metadata=dict(args), **evaluate,
    )  # fmt: skip
    compiled = compile_uses(
        record.uses, spec, runtime, mesh, dtype, setup.buckets,
        count_layers=count_layers, progress=progress,
    )  # fmt: skip
    return TasksPlan(
        topology=topo,
        model_type=spec.model_type,
        dtype=dtype,
        max_length=setup.max_length,
        token_budget=setup.token_budget,
        tasks=tuple(tasks),
        counts=record.counts,
        uses=record.uses,
        compiled=compiled,
    )


def print_tasks_plan(model_args: str, topology: str, tasks: list[str], *, as_json: bool = False, **kw: Any) -> int:  # fmt: skip
    """`jaxeval plan --topology T --tasks ...`: the table or JSON; 1 when an executable does not
    compile or fit (the compiler's words on stderr)."""
    plan = plan_tasks(
        model_args, topology, tasks, progress=lambda s: print(s, file=sys.stderr, flush=True), **kw
    )
    print(json.dumps(plan.to_json(), indent=2) if as_json else plan.table())
    for c in plan.compiled.values():
        if c.error is not None:
            print(f"{c.name}: does not compile: {c.error[:500]}", file=sys.stderr)
        elif c.hbm_bytes > plan.topology.chip.allowed_hbm_bytes:
            print(f"{c.name}: needs {c.hbm_bytes / (1 << 30):.2f} GiB per chip", file=sys.stderr)
    return 0 if plan.ok else 1
