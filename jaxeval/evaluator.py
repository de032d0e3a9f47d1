"""`simple_evaluate` and `evaluate`, with lm-eval's signatures and semantics.

    results = jaxeval.simple_evaluate(model="jax", model_args="pretrained=/ckpt,dtype=float32",
                                      tasks=["arc_easy"], num_fewshot=0, limit=100)
    results["results"]["arc_easy"]["acc,none"]

`simple_evaluate`'s parameters are `jaxeval.run_config.RunConfig`'s fields; `evaluate_run` takes
the `RunConfig` itself (the `jaxeval` command builds one from its options).

Requests of one type from all tasks go to the model in one call (the model packs and buckets them);
`repeats` are expanded consecutively; every request must come back exactly once.

Two questions are kept apart: which documents this evaluator builds (`lm.rank` / `lm.world_size`,
lm-eval's data-parallel striding; JaxLM is one logical evaluator over all processes, so 0 / 1) and
who reports (`reports_results(lm)`: process 0 of a multi-process JaxLM, else `rank == 0`). Only
the main process writes caches and gets results; the others return None, as lm-eval's other ranks do.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import random
import time
from typing import Any

import numpy as np

from jaxeval import preflight
from jaxeval.api import request_cache
from jaxeval.api.instance import REQUEST_TYPES, Instance
from jaxeval.api.task_manager import LoadedTasks, TaskManager
from jaxeval.cache import ResponseStore, response_cache
from jaxeval.errors import JaxevalError
from jaxeval.lm.args import parse_model_args
from jaxeval.lm.base import LM, MODELS
from jaxeval.platform import distributed, phases
from jaxeval.results.aggregate import TaskAccumulator, build_results
from jaxeval.results.files import handle_non_serializable
from jaxeval.run_config import RunConfig
from jaxeval.run_info import environment_info, tokenizer_info

log = logging.getLogger(__name__)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _cache_mode(cache_requests: bool | str, rewrite: bool) -> str | None:
    if not cache_requests or cache_requests == "false":
        return None
    return "refresh" if rewrite or cache_requests == "refresh" else "true"


def reports_results(lm: Any) -> bool:
    """Whether `lm` reports results and writes files: its `is_main_process`, else `rank == 0`."""
    main = getattr(lm, "is_main_process", None)
    return bool(main) if main is not None else lm.rank == 0


def run_requests(lm: Any, instances: list[Instance]) -> None:
    """Sends each request type once to the model (repeats expanded) and fills `resps` in order."""
    by_type: dict[str, list[Instance]] = collections.defaultdict(list)
    for inst in instances:
        by_type[inst.request_type].append(inst)
    for kind in REQUEST_TYPES:
        reqs = by_type.get(kind)
        if not reqs:
            continue
        cloned = [r for r in reqs for _ in range(r.repeats or 1)]
        log.info("running %d %s requests", len(cloned), kind)
        resps = getattr(lm, kind)(cloned)
        if len(resps) != len(cloned):
            raise RuntimeError(f"the model answered {len(resps)} of {len(cloned)} {kind} requests")
        for resp, req in zip(resps, cloned):
            req.resps.append(resp)


def evaluate(
    lm: Any,
    task_dict: LoadedTasks,
    limit: int | float | None = None,
    samples: dict[str, list[int]] | None = None,
    cache_requests: bool = False,
    rewrite_requests_cache: bool = False,
    bootstrap_iters: int | None = 100000,
    write_out: bool = False,
    log_samples: bool = True,
    system_instruction: str | None = None,
    apply_chat_template: bool | str = False,
    fewshot_as_multiturn: bool = False,
    verbosity: str | None = None,
    confirm_run_unsafe_code: bool = False,
) -> dict[str, Any] | None:
    """Builds every task's requests, runs them through `lm`, filters, scores and aggregates."""
    if limit is not None and samples is not None:
        raise JaxevalError("--limit and --samples cannot be used together", field="limit")
    tasks, groups = task_dict.tasks, task_dict.groups
    for name, task in tasks.items():
        if task.config.unsafe_code and not confirm_run_unsafe_code:
            raise JaxevalError(
                "the task runs untrusted code",
                task=name,
                field="unsafe_code",
                hint="pass --confirm_run_unsafe_code if you accept that",
            )
        if task.config.doc_to_image is not None or task.config.doc_to_audio is not None:
            raise JaxevalError("multimodal tasks are not supported by jaxeval models", task=name)
    if samples:
        unknown = sorted(set(samples) - set(tasks))
        if unknown:
            raise JaxevalError(
                f"--samples names tasks that are not being run: {unknown}", field="samples"
            )
    main = reports_results(lm)
    limits: dict[str, int | None] = {}
    all_instances: list[Instance] = []
    preflight.check_chat_template(lm, apply_chat_template)
    chat = getattr(lm, "apply_chat_template", None) if apply_chat_template else None
    for name, task in tasks.items():
        limits[name] = preflight.sample_size(len(task.eval_docs), limit, name)
        with phases.phase("prompts"):
            task.build_all_requests(
                limit=limits[name],
                samples=(samples or {}).get(name),
                rank=lm.rank,
                world_size=lm.world_size,
                system_instruction=system_instruction,
                apply_chat_template=bool(apply_chat_template),
                fewshot_as_multiturn=fewshot_as_multiturn,
                chat_template=chat,
                # Other processes build the same requests afresh; only the main one touches the cache.
                cache_requests=_cache_mode(cache_requests, rewrite_requests_cache)
                if main
                else None,
                tokenizer_name=getattr(lm, "tokenizer_name", "") if apply_chat_template else "",
            )
        if write_out and main:
            first = task.instances[0]
            print(
                f"Task: {name}; document {first.doc_id}; context prompt:\n{first.args[0]}\n"
                f"(end of prompt)\ntarget: {task.doc_to_target(first.doc)}\nRequest: {first}"
            )
        all_instances += task.instances
    with phases.phase("dispatch"):
        run_requests(lm, all_instances)
    if not main:  # the main process holds every answer; nothing here is reported
        return None
    with phases.phase("metrics"):
        return _score(lm, tasks, groups, limits, samples, bootstrap_iters, log_samples)


def _score(
    lm: Any,
    tasks: dict[str, Any],
    groups: dict[str, Any],
    limits: dict[str, int | None],
    samples: dict[str, list[int]] | None,
    bootstrap_iters: int | None,
    log_samples: bool,
) -> dict[str, Any] | None:
    """Filters, per-document metrics and samples records, then the aggregated results."""
    accs: dict[str, TaskAccumulator] = {}
    for name, task in tasks.items():
        acc = accs[name] = TaskAccumulator(task)
        task.apply_filters()
        by_doc: dict[int, list[Instance]] = collections.defaultdict(list)
        for inst in task.instances:
            by_doc[inst.doc_id].append(inst)
        for insts in by_doc.values():
            insts.sort(key=lambda x: x.idx)
        indices = (samples or {}).get(name)
        for flt in task.instances[0].filtered_resps:
            for doc_id, doc in task.doc_iterator(
                limit=limits[name], samples=indices, rank=lm.rank, world_size=lm.world_size
            ):
                reqs = by_doc[doc_id]
                metrics = task.process_results(
                    doc, [r.filtered_resps[flt] for r in reqs], doc_index=doc_id
                )
                if log_samples:
                    target = task.doc_to_target(doc)
                    record = {
                        "doc_id": indices[doc_id] if indices else doc_id,
                        "doc": doc,
                        "target": target,
                        "arguments": [r.args for r in reqs],
                        "resps": [r.resps for r in reqs],
                        "filtered_resps": [r.filtered_resps[flt] for r in reqs],
                        "filter": flt,
                        "metrics": list(metrics),
                        "doc_hash": _hash(
                            json.dumps(
                                reqs[0].doc,
                                indent=2,
                                default=handle_non_serializable,
                                ensure_ascii=False,
                            )
                        ),
                        "prompt_hash": _hash(reqs[0].arguments[0]),
                        "target_hash": _hash(str(target)),
                    }
                    record.update(metrics)
                    acc.samples.append(record)
                for metric, value in metrics.items():
                    acc.raw_metrics.setdefault((metric, flt), []).append(value)
                acc.derived.update(getattr(metrics, "derived", {}))
    if lm.rank != 0:
        return None
    return build_results(accs, groups, bootstrap_iters, log_samples=log_samples)


def _reports(model: Any) -> bool:
    """Whether this process will report (and own the response cache), before the model exists."""
    if isinstance(model, str):
        return distributed.is_main_process()
    return reports_results(model)


def _timing(clock: dict[str, float], model: Any) -> dict[str, float]:
    """Seconds spent loading tasks, building the model, evaluating; and from the model being
    built to the first scoring batch handed to the device (requests built, planned, its shape
    compiled or loaded from the persistent cache) and to its results."""
    out = {
        "tasks_s": clock["tasks"] - clock["start"],
        "model_s": clock["model"] - clock["tasks"],
        "evaluate_s": clock["evaluated"] - clock["model"],
    }
    for name, attr in (
        ("first_batch_start_after_model_s", "first_dispatched_at"),
        ("first_batch_after_model_s", "first_scored_at"),
    ):
        at = getattr(model, attr, None)
        if at is not None and at >= clock["model"]:
            out[name] = at - clock["model"]
    return {k: round(v, 3) for k, v in out.items()}


def _load_tasks(task_manager: TaskManager, tasks: list[Any]) -> LoadedTasks:
    try:
        return task_manager.load(list(tasks))
    except JaxevalError as e:
        if not e.message.startswith("unknown task"):
            raise
        raise preflight.explain_unknown_task(e, task_manager) from None


def _make_lm(model: Any, model_args: Any, batch_size: Any, max_batch_size: Any, device: Any) -> LM:
    if not isinstance(model, str):
        if not all(hasattr(model, m) for m in REQUEST_TYPES):
            raise JaxevalError(
                f"model of type {type(model).__name__} is not a jaxeval LM",
                hint="pass a model name such as 'jax', or an object with the three request methods",
            )
        return model
    import jaxeval.lm.jax_lm  # noqa: F401  (registers "jax" and "hf"; imported here to keep start-up light)

    cls = MODELS.get(model)
    extra = {"batch_size": batch_size, "max_batch_size": max_batch_size, "device": device}
    args = parse_model_args(model_args)
    return cls(**args, **{k: v for k, v in extra.items() if v is not None})


def simple_evaluate(*args: Any, **kwargs: Any) -> dict[str, Any] | None:
    """Builds the model and tasks, applies run-time overrides, evaluates, adds run metadata.

    lm-eval 0.4.13's parameters, positional or keyword: `RunConfig`'s fields, which make this
    function's signature (`inspect.signature(simple_evaluate)`). An unknown keyword is a
    `JaxevalError` that suggests the nearest. `evaluate_run` takes the `RunConfig` itself.
    """
    return evaluate_run(RunConfig.from_call(args, kwargs))


# lm-eval's parameter list, made from the fields: what `help`, `inspect` and editors show
simple_evaluate.__signature__ = RunConfig.signature(  # type: ignore[attr-defined]
    returns="dict[str, Any] | None"
)


def evaluate_run(config: RunConfig) -> dict[str, Any] | None:
    """`simple_evaluate` of a `RunConfig`: the results, or None on a process that does not report.

    The results' `timing` block says where the time went (`jaxeval.platform.phases`). The run's
    clock starts here unless one runs already (the `jaxeval` command's, from the process's start);
    whoever started it writes the block, once, at the run's end (`add_timing`).
    """
    own_clock = phases.current() is None
    if own_clock:
        phases.begin_run()
    try:
        results = _simple_evaluate(config)
        if results is not None and own_clock:
            add_timing(results)
        return results
    finally:
        if own_clock:
            phases.end_run()


def add_timing(*results: dict[str, Any]) -> None:
    """Writes the results' `timing` block, the current run's phase clock as of now, into each of
    `results` (a results dict and its copies). The one writer of the block, called once by the
    clock's owner at the run's end: `evaluate_run`, or the `jaxeval` command just before the
    results JSON is made (the block then counts the writing of the files)."""
    clock = phases.current()
    if clock is None:
        raise RuntimeError("the timing block needs a run's clock (phases.begin_run)")
    block = clock.block()
    for each in results:
        each["timing"] = block


def _simple_evaluate(config: RunConfig) -> dict[str, Any] | None:
    start = time.time()
    if config.random_seed is not None:
        random.seed(config.random_seed)
    if config.numpy_random_seed is not None:
        np.random.seed(config.numpy_random_seed)
    gen_kwargs = config.gen_kwargs
    if isinstance(gen_kwargs, str):
        gen_kwargs = parse_model_args(gen_kwargs, "gen_kwargs") or None
    preflight.warn_chat_model_without_template(config.model_args, config.apply_chat_template)
    task_manager = _task_manager(config)
    clock = {"start": time.perf_counter()}
    with phases.phase("data"):
        loaded = _load_tasks(task_manager, config.tasks)
    _override_tasks(loaded, config, gen_kwargs)
    # Everything checkable without the model is checked before it loads (jaxeval/preflight.py).
    preflight.check_generation_kwargs(loaded.tasks)
    preflight.check_tasks(
        loaded.tasks,
        limit=config.limit,
        samples=config.samples,
        fewshot_seed=config.fewshot_random_seed,
    )
    model, use_cache = config.model, config.use_cache
    store = None
    if use_cache is not None and _reports(model):
        store = ResponseStore(f"{use_cache}_rank{0 if isinstance(model, str) else model.rank}.db")
    clock["tasks"] = time.perf_counter()
    with phases.phase("model"):
        lm = _make_lm(
            model, config.model_args, config.batch_size, config.max_batch_size, config.device
        )
    clock["model"] = time.perf_counter()
    if config.delete_requests_cache and reports_results(lm):
        request_cache.delete_all()
    if use_cache is not None:
        lm = response_cache(lm, store or f"{use_cache}_rank{lm.rank}.db")
    results = evaluate(
        lm,
        loaded,
        limit=config.limit,
        samples=config.samples,
        cache_requests=config.cache_requests,
        rewrite_requests_cache=config.rewrite_requests_cache,
        bootstrap_iters=config.bootstrap_iters,
        write_out=config.write_out,
        log_samples=True if config.predict_only else config.log_samples,
        system_instruction=config.system_instruction,
        apply_chat_template=config.apply_chat_template,
        fewshot_as_multiturn=config.fewshot_as_multiturn,
        confirm_run_unsafe_code=config.confirm_run_unsafe_code,
    )
    if results is None:
        return None
    clock["evaluated"] = time.perf_counter()
    base = lm.lm if hasattr(lm, "lm") and not isinstance(lm, LM) else lm
    results["config"] = _config_block(config, base, gen_kwargs)
    results["config"]["timing"] = _timing(clock, base)
    if use_cache is not None and hasattr(
        lm, "cache_stats"
    ):  # answers served from the file / computed
        results["config"]["response_cache"] = lm.cache_stats()

    env = environment_info()
    results["git_hash"] = env.pop("git_hash")
    results["date"] = start
    results.update(env)
    results.update(tokenizer_info(base))
    return results


def _task_manager(config: RunConfig) -> TaskManager:
    """The config's task manager, else one whose task metadata is the model's arguments and
    `metadata` over them."""
    if config.task_manager is not None:
        return config.task_manager
    model_args = config.model_args
    meta = parse_model_args(model_args) if isinstance(model_args, str) else dict(model_args or {})
    return TaskManager(metadata={**meta, **(config.metadata or {})})


def _override_tasks(loaded: LoadedTasks, config: RunConfig, gen_kwargs: dict | None) -> None:
    """The run's overrides of every task: generation arguments, `--predict_only`'s metric,
    `--num_fewshot` (a task pinned to 0 keeps 0) and the few-shot seed."""
    num_fewshot = config.num_fewshot
    for task in loaded.tasks.values():
        if task.config.output_type == "generate_until" and gen_kwargs:
            task.set_config(
                generation_kwargs={**(task.config.generation_kwargs or {}), **gen_kwargs}
            )
        if config.predict_only:
            task.override_metric("bypass")
        if num_fewshot is not None:
            if task.config.num_fewshot == 0:
                log.info("num_fewshot is pinned to 0 for %s; ignoring --num_fewshot", task.name)
            else:
                task.set_config(num_fewshot=num_fewshot)
        elif task.config.num_fewshot is None:
            task.set_config(num_fewshot=0)
        task.set_fewshot_seed(config.fewshot_random_seed)


def _config_block(config: RunConfig, base: Any, gen_kwargs: dict | None) -> dict[str, Any]:
    """The results' `config` block: the run's arguments lm-eval records, and the model's own."""
    model = config.model
    return {
        "model": model if isinstance(model, str) else type(model).__name__,
        "model_args": config.model_args,
        **(base.model_info() if hasattr(base, "model_info") else {}),
        "batch_size": config.batch_size,
        "batch_sizes": list(getattr(base, "batch_sizes", {}).values())
        if isinstance(getattr(base, "batch_sizes", None), dict)
        else [],
        "device": config.device,
        "use_cache": config.use_cache,
        "limit": config.limit,
        "bootstrap_iters": config.bootstrap_iters,
        "gen_kwargs": gen_kwargs,
        "random_seed": config.random_seed,
        "numpy_seed": config.numpy_random_seed,
        "torch_seed": config.torch_random_seed,
        "fewshot_seed": config.fewshot_random_seed,
    }
