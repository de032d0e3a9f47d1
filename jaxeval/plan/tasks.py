"""`jaxeval plan --topology v5e-8 --tasks arc_easy,gsm8k`: a run of those tasks, compiled for a TPU
slice on this host, and what it costs per task.

    jaxeval plan --topology v5e-8 --tasks arc_easy,gsm8k --data_dir D \\
        --model_args pretrained=configs/models/llama-3-8b,tokenizer=TOKENIZER_DIR

1. The run's setup (`run_setup`), as `JaxLM` decides it on that slice: the model's arguments
   (`JaxLMConfig`), its tokenizer, `max_length`, the token budget the run would pick on the chip
   (`budget.token_budget_for` on the HBM left after the parameters) and its bucket grid.
2. The tasks read by the run's own code (`simple_evaluate` with a `RequestRecorder` as the model,
   `jaxeval.plan.requests`): documents, few-shot prompts, requests, tokenization, score plans and
   the generation engine's schedule. The result: every executable the run compiles (its key) and
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
from jaxeval.lm.args import parse_model_args
from jaxeval.lm.encoding import resolve_max_length
from jaxeval.lm.generate.config import eos_ids_of, load_generation_config
from jaxeval.lm.generate.kwargs import SamplingDefaults
from jaxeval.lm.generate.stops import special_token_ids
from jaxeval.lm.jax_lm import check_tokenizer_files
from jaxeval.lm.model_config import JaxLMConfig
from jaxeval.lm.score.buckets import parse_buckets
from jaxeval.lm.score.budget import token_budget_for
from jaxeval.lm.score.shaping import point_cost_of
from jaxeval.models.families import spec_from_config
from jaxeval.models.runtime import make_runtime
from jaxeval.plan.costs import (
    Compiled,
    compile_job,
    layer_costs,
    sharded_abstract_params,
    step_costs,
)
from jaxeval.plan.jobs import abstract_engine, param_bytes_per_chip, scoring_jobs, topology_mesh
from jaxeval.plan.memory import read_config
from jaxeval.plan.requests import RequestRecorder, RunSetup, Use, run_tasks
from jaxeval.plan.topology import Topology, get_topology
from jaxeval.platform.mesh import batch_shards

# Host seconds per million scored tokens: docs/performance.md, the warm ARC-Easy + LAMBADA run on
# 2 cores ((wall - device - compile) / scored tokens; start-up, data and model loading included)
HOST_S_PER_M_TOKENS = 9.1
# the device's share of its roofline a run reaches, low and high (the printed range)
ROOFLINE_SHARE = (0.4, 0.6)


def run_tokenizer(config: JaxLMConfig) -> Any:
    """The run's tokenizer (`JaxLM._make_tokenizer`'s rules for a directory): `tokenizer=` in the
    model's arguments, else the checkpoint directory; a directory without one is a clear error."""
    from transformers import AutoTokenizer

    where = config.tokenizer or str(config.pretrained)
    check_tokenizer_files(where)
    kwargs: dict[str, Any] = {
        "trust_remote_code": config.trust_remote_code,
        "use_fast": config.use_fast_tokenizer,
    }
    if config.add_bos_token is not None:
        kwargs["add_bos_token"] = config.add_bos_token
    return AutoTokenizer.from_pretrained(where, **kwargs)


def run_setup(
    config: JaxLMConfig,
    spec: Any,
    hf_config: Any,
    mesh: Any,
    *,
    free_bytes: int | None,
    engine_free_bytes: int | None = None,
    tokenizer: Any = None,
) -> RunSetup:
    """What `JaxLM` decides before any request, from the same functions, on `mesh` whose devices
    have `free_bytes` free after the parameters (the token budget's rule; None: the CPU's) and
    `engine_free_bytes` for the generation engine (default `free_bytes`; on the CPU the run gives
    it the host's memory per device, `sizing.free_bytes_per_device`)."""
    tokenizer = tokenizer if tokenizer is not None else run_tokenizer(config)
    max_length = int(config.max_length or resolve_max_length(hf_config, tokenizer))
    shards = batch_shards(mesh)
    budget = config.token_budget or token_budget_for(
        spec, free_bytes, shards if free_bytes is not None else 1, max_length, config.max_batch_size
    )
    buckets = parse_buckets(
        config.buckets, max_length=max_length, token_budget=int(budget), row_multiple=shards
    )
    gen_config = load_generation_config(str(config.pretrained), hf_config)
    return RunSetup(
        config=config,
        tokenizer=tokenizer,
        max_length=max_length,
        token_budget=int(budget),
        buckets=buckets,
        point_cost=point_cost_of(spec.hidden_size, spec.vocab_size, body_params_all(spec)),
        shards=shards,
        free_bytes=free_bytes if engine_free_bytes is None else engine_free_bytes,
        spec=spec,
        eos_ids=eos_ids_of(gen_config, hf_config),
        sampling_defaults=SamplingDefaults.from_generation_config(gen_config),
        specials=special_token_ids(tokenizer),
    )


def body_params_all(spec: Any) -> int:
    """Parameters outside the embedding and LM head, every expert counted (`JaxLM._point_cost`)."""
    embed = spec.vocab_size * spec.hidden_size
    return spec.param_count() - embed - (0 if spec.tie_embeddings else embed)


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
) -> tuple[RunSetup, RequestRecorder]:
    """The run's setup on `mesh` (`run_setup`) and its requests and executables for `tasks`
    (`jaxeval.plan.requests`); `evaluate`: limit, num_fewshot, gen_kwargs as the run takes them,
    `data_dir` the run's `--data_dir`."""
    setup = run_setup(
        config, spec, hf_config, mesh,
        free_bytes=free_bytes, engine_free_bytes=engine_free_bytes, tokenizer=tokenizer,
    )  # fmt: skip
    recorder = RequestRecorder(setup)
    meta = metadata if metadata is not None else {"pretrained": str(config.pretrained)}
    manager = TaskManager(metadata=meta, data_dir=data_dir)
    run_tasks(recorder, tasks, task_manager=manager, **evaluate)
    return setup, recorder


# ---- compiling ----------------------------------------------------------------------------------
def _builder(use: Use) -> tuple[str, Any, Any]:
    """(name, build(spec, runtime, params) -> Job, steps(n) -> build or None) of a generation use."""
    d = use.detail
    rows, slots, n_new, sample = d[0], d[1], d[2], d[3]

    def engine(sp, rt, pa):
        return abstract_engine(sp, rt, pa, rows=rows, slots=slots, n_new=n_new, sample=sample)

    where = f"{rows} x {slots} slots"
    if use.kind == "prefix":
        return (
            f"prefix {d[4]} tokens",
            lambda sp, rt, pa: engine(sp, rt, pa).prefix_job(d[4]),
            None,
        )
    if use.kind == "admit":
        u, r, pw, width = d[4:]
        return (
            f"admit {u} x {width} tokens into {r} of {where}" + (f" after {pw}" if pw else ""),
            lambda sp, rt, pa: engine(sp, rt, pa).admit_job(u, r, pw, width),
            None,
        )
    if use.kind == "decode":
        return (
            f"decode step {where}",
            lambda sp, rt, pa: engine(sp, rt, pa).decode_job(),
            lambda n: lambda sp, rt, pa: engine(sp, rt, pa).decode_job(n),
        )
    if use.kind == "shrink":
        small = d[4]

        def shrink(sp, rt, pa):
            return engine(sp, rt, pa).shrink_job(
                abstract_engine(sp, rt, pa, rows=small, slots=slots, n_new=n_new, sample=sample)
            )

        return f"move {rows} -> {small} rows of {slots} slots", shrink, None
    job = "init_job" if use.kind == "init" else "peek_job"
    return f"{use.kind} {where}", lambda sp, rt, pa: getattr(engine(sp, rt, pa), job)(), None


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
    False; the small state pieces (init, peek, move) keep the compiler's own counts."""
    params = sharded_abstract_params(spec, mesh, dtype)
    out: dict[Hashable, Compiled] = {}
    for key, use in uses.items():
        if use.kind == "score":
            (planned,) = scoring_jobs(spec, mesh, grid, [use.detail])
            name, build, count, steps = planned.name, planned.build, planned.count, None
        else:
            name, build, steps = _builder(use)
            count = build
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
        if job.key != key:  # the recorder's key is the owner's own (`Scorer.job`, the engine's)
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
    setup, recorder = record_run(
        config, spec, hf_config, mesh, tasks, free_bytes=topo.chip.allowed_hbm_bytes - per_chip,
        metadata=dict(args), **evaluate,
    )  # fmt: skip
    compiled = compile_uses(
        recorder.uses, spec, runtime, mesh, dtype, setup.buckets,
        count_layers=count_layers, progress=progress,
    )  # fmt: skip
    return TasksPlan(
        topology=topo,
        model_type=spec.model_type,
        dtype=dtype,
        max_length=setup.max_length,
        token_budget=setup.token_budget,
        tasks=tuple(tasks),
        counts=recorder.counts,
        uses=recorder.uses,
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
