"""`jaxeval run` (also `jaxeval --model ... --tasks ...`, lm-eval's legacy form): evaluate a model
on tasks with lm-eval's flags, print lm-eval's table, write its results and samples files.

    jaxeval run --model jax --model_args pretrained=DIR,dtype=bfloat16 --tasks arc_easy,mmlu \\
        --num_fewshot 5 --batch_size auto --output_path out/ --log_samples
    jaxeval run --model_args pretrained=DIR dtype=float32 --tasks arc_easy hellaswag   (lm-eval's
        space-separated forms; `jaxeval.cli.run_args`)
    jaxeval run --config run.yaml --limit 10        (the YAML's keys are flags; the command line wins)

Checks that need no model come first (every value of every flag, `--device`'s platform, the model's
arguments, `--log_samples` without `--output_path`, a results folder that cannot be written, a bad
tracker flag), so bad input fails in seconds, before the model loads.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from typing import Any

from jaxeval.cli.base import Subcommand
from jaxeval.cli.device import check_device, select_platform
from jaxeval.cli.hub import offline_unless_reachable
from jaxeval.cli.lm_eval_options import refusal, refused
from jaxeval.cli.model_check import check_model_args
from jaxeval.cli.run_args import (
    DEFAULT_SEED,
    ListArgs,
    WordArgs,
    batch_size_value,
    bool_value,
    cache_request_fields,
    check_values,
    dict_arg,
    limit_value,
    model_args_text,
    parse_run_args,
    seed_fields,
    seed_values,
)
from jaxeval.cli.validate import validate_tasks
from jaxeval.errors import JaxevalError
from jaxeval.run_config import RunConfig


def _parse_samples(text: Any) -> dict[str, list[int]] | None:
    if text is None or isinstance(text, dict):
        return text
    raw = open(text, encoding="utf-8").read() if os.path.isfile(text) else text
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise JaxevalError(f"--samples is not valid JSON: {e}", field="samples") from None
    if not isinstance(value, dict) or not all(isinstance(v, list) for v in value.values()):
        raise JaxevalError(
            '--samples must map task names to lists of indices, e.g. {"arc_easy": [0, 3]}',
            field="samples",
        )
    return value


class RunCommand(Subcommand):
    name = "run"
    description = (
        "Evaluate a model on tasks. Every option of lm-eval 0.4.13's `run` is accepted in its "
        "forms (lists space- or comma-separated; k=v words or JSON) or refused by name: "
        "docs/cli.md."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        a = parser.add_argument
        words = {"nargs": "+", "action": WordArgs, "default": None}
        a("--config", "-C", default=None, help="YAML of option names (the command line wins)")
        a("--model", "-M", default="jax", help="model name: jax (alias hf)")
        a(
            "--model_args",
            "-a",
            metavar="ARG",
            help="k=v words, k=v,k2=v2 or a JSON object",
            **words,
        )
        a(
            "--tasks",
            "-t",
            nargs="+",
            action=ListArgs,
            default=None,
            metavar="TASK",
            help="task, group or tag names or YAML paths, space- or comma-separated",
        )
        a("--num_fewshot", "-f", type=int, default=None)
        a("--batch_size", "-b", type=batch_size_value, default=1)
        a("--max_batch_size", type=int, default=None)
        a("--device", default=None, help="JAX platform: cpu, cuda/gpu or tpu (default: JAX's)")
        a("--output_path", "-o", default=None)
        a("--limit", "-L", type=limit_value, default=None)
        a("--samples", "-E", default=None, help='JSON {"task": [doc indices]} or a file holding it')
        a("--use_cache", "-c", default=None, help="sqlite response cache path prefix")
        a(
            "--cache_requests",
            nargs="?",
            const="true",
            choices=["true", "refresh", "delete"],
            default=None,
        )
        a(
            "--check_integrity",
            action="store_true",
            help="validate the tasks (render every request) first",
        )
        a("--write_out", "-w", action="store_true")
        a("--log_samples", "-s", action="store_true")
        a("--system_instruction", default=None)
        a("--apply_chat_template", nargs="?", const=True, default=False)
        a("--fewshot_as_multiturn", nargs="?", const=True, type=bool_value, default=None)
        a("--show_config", action="store_true")
        a("--include_path", default=None)
        a(
            "--data_dir",
            default=None,
            help="local copies of hub datasets, laid out DIR/<repo>/[<config>/]<split>.jsonl",
        )
        a(
            "--gen_kwargs",
            metavar="ARG",
            help="k=v words merged into every generation task",
            **words,
        )
        a("--verbosity", "-v", default=None, help="a logging level (DEBUG, INFO, ...)")
        a("--predict_only", "-x", action="store_true")
        a("--seed", type=seed_values, default=list(DEFAULT_SEED))
        a("--trust_remote_code", action="store_true")
        a("--confirm_run_unsafe_code", action="store_true")
        a("--metadata", metavar="ARG", help="k=v words or JSON, merged into task metadata", **words)
        a("--bootstrap_iters", type=int, default=100000)
        a(
            "--compilation_cache",
            default=None,
            help="directory of JAX's persistent compilation cache, or 'off' (default: "
            "$JAXEVAL_COMPILATION_CACHE, else ~/.cache/jaxeval/xla)",
        )
        a(
            "--distributed",
            action="store_true",
            help="join a multi-process run (jax.distributed; JAXEVAL_COORDINATOR etc. or auto-detected); "
            "implied when JAXEVAL_COORDINATOR is set",
        )
        for flag, what in (
            ("--wandb_args", "wandb.init arguments, key=value (project=, name=, step=, ...)"),
            ("--wandb_config_args", "added to the W&B run's config, key=value"),
            ("--hf_hub_log_args", "Hugging Face Hub upload, key=value (hub_results_org=, "
                                  "push_results_to_hub=True, ...; see docs/report.md)"),
        ):  # fmt: skip
            a(flag, metavar="ARG", help=what, **words)
        for option in refused("run"):
            a(*option.names, nargs="*", default=None, help=argparse.SUPPRESS)

    def parse_args(self, argv: list[str]) -> argparse.Namespace:
        return parse_run_args(self.parser(), argv)

    def execute(self, args: argparse.Namespace) -> int:
        from jaxeval.platform import phases  # (start-up: see `_execute`)

        clock = phases.begin_run(phases.run_start())
        try:
            return self._execute(args, clock)
        finally:
            phases.end_run()

    def _execute(self, args: argparse.Namespace, clock: Any) -> int:
        # start-up: each subcommand loads only what it runs (`jaxeval --help` needs none of these)
        from jaxeval.evaluator import evaluate_run

        prepared = _prepare(args)
        start = time.time()
        # the options named as run arguments pass as given; these are computed from the options
        config = RunConfig.from_cli(
            args,
            model_args=prepared.model_args,
            tasks=prepared.tasks,
            samples=prepared.samples,
            fewshot_as_multiturn=prepared.fewshot_as_multiturn,
            gen_kwargs=prepared.gen_kwargs,
            task_manager=prepared.task_manager,
            metadata=prepared.metadata,
            **seed_fields(args.seed),
            **cache_request_fields(args.cache_requests),
        )
        results = evaluate_run(config)
        if results is None:  # another process of a multi-process run reports
            return 0
        _report(args, prepared, results, start=start, clock=clock)
        return 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Prepared:
    """What `jaxeval run` derives from its options before the run (every check passed)."""

    model_args: str
    tasks: list[str]
    metadata: dict[str, Any] | None
    gen_kwargs: dict[str, Any] | None
    samples: dict[str, list[int]] | None
    fewshot_as_multiturn: bool
    task_manager: Any
    loggers: Any  # the trackers (W&B, Hub), started on the main process only


def _prepare(args: argparse.Namespace) -> _Prepared:
    """Every check that needs no model (module docstring), counted as start-up; the trackers
    started and the tasks indexed."""
    # start-up: each subcommand loads only what it runs (`jaxeval --help` needs none of these)
    from jaxeval.api.task_manager import TaskManager
    from jaxeval.lm.args import parse_model_args
    from jaxeval.platform import distributed, phases
    from jaxeval.preflight import check_output_path
    from jaxeval.trackers.run_loggers import RunLoggers

    with phases.phase("startup"):
        refusal("run", vars(args))
        check_values(args)
        model_args = model_args_text(args.model_args)
        metadata = dict_arg(args.metadata, "metadata") or None
        gen_kwargs = dict_arg(args.gen_kwargs, "gen_kwargs") or None
        samples = _parse_samples(args.samples)
        select_platform(args.device)
        if args.compilation_cache is not None:  # read by platform.compile_cache at model load
            os.environ["JAXEVAL_COMPILATION_CACHE"] = str(args.compilation_cache)
        main_process = True
        if args.distributed or distributed.requested_by_env():
            distributed.initialize()  # before anything touches JAX devices
            main_process = distributed.is_main_process()
        check_device(args.device)
        if args.verbosity:
            logging.getLogger().setLevel(str(args.verbosity).upper())
        fewshot_as_multiturn = _check_run_flags(args)
        if args.trust_remote_code:
            os.environ["HF_DATASETS_TRUST_REMOTE_CODE"] = "1"
            model_args = _add_model_arg(model_args, "trust_remote_code", True)
        if args.confirm_run_unsafe_code:
            # catalogue helpers that score code (humaneval, mbpp) run it through code_eval, which
            # refuses without this variable, even while the helper is imported
            os.environ.setdefault("HF_ALLOW_CODE_EVAL", "1")
        check_model_args(
            args.model,
            model_args,
            batch_size=args.batch_size,
            max_batch_size=args.max_batch_size,
        )
        task_list = list(args.tasks)
        meta = {**parse_model_args(model_args), **(metadata or {})}
        loggers = None
        if main_process:  # before the tasks and the model load: a run must not fail only when it
            # saves, and a bad tracker flag or an unreachable Hub fails in seconds
            check_output_path(args.output_path, model_args)
            loggers = RunLoggers.start(
                wandb_args=args.wandb_args,
                wandb_config_args=args.wandb_config_args,
                hf_hub_log_args=args.hf_hub_log_args,
                output_path=args.output_path,
                log_samples=args.log_samples,
                model_source=args.model,
            )
        offline_unless_reachable()
        tm = TaskManager(args.include_path, metadata=meta, data_dir=args.data_dir)
        if args.check_integrity and main_process:
            validate_tasks(tm, task_list)
    return _Prepared(
        model_args=model_args,
        tasks=task_list,
        metadata=metadata,
        gen_kwargs=gen_kwargs,
        samples=samples,
        fewshot_as_multiturn=fewshot_as_multiturn,
        task_manager=tm,
        loggers=loggers,
    )


def _check_run_flags(args: argparse.Namespace) -> bool:
    """The flags that go together (tasks, `--log_samples` with `--output_path`,
    `--fewshot_as_multiturn` with `--apply_chat_template`); the resolved `fewshot_as_multiturn`
    (default: with a chat template)."""
    if not args.tasks:
        raise JaxevalError(
            "no tasks given", field="tasks", hint="pass --tasks, or run `jaxeval ls tasks`"
        )
    if args.predict_only:
        args.log_samples = True
    if args.log_samples and not args.output_path:
        raise JaxevalError(
            "--log_samples (and --predict_only) need --output_path", field="output_path"
        )
    if args.fewshot_as_multiturn and not args.apply_chat_template:
        raise JaxevalError(
            "--fewshot_as_multiturn needs --apply_chat_template", field="fewshot_as_multiturn"
        )
    if args.fewshot_as_multiturn is None:
        return bool(args.apply_chat_template)
    return bool(args.fewshot_as_multiturn)


def _report(
    args: argparse.Namespace, prepared: _Prepared, results: dict, *, start: float, clock: Any
) -> None:
    """The results on screen (the table first: a failed save still leaves the scores there),
    then the results file and the trackers, each with the run's one timing block."""
    # start-up: each subcommand loads only what it runs (`jaxeval --help` needs none of these)
    from jaxeval.evaluator import add_timing
    from jaxeval.platform import phases
    from jaxeval.results.files import make_table, model_name, save_results

    model_args, gen_kwargs = prepared.model_args, prepared.gen_kwargs
    if args.show_config:  # the timing block as of now; the results' own is made at the end
        shown = {k: v for k, v in results.items() if k != "samples"}
        add_timing(shown)
        print(json.dumps(shown, indent=2, default=str, ensure_ascii=False))
    print(
        f"{args.model} ({model_args}), gen_kwargs: ({gen_kwargs}), limit: {args.limit}, "
        f"num_fewshot: {args.num_fewshot}, batch_size: {args.batch_size}"
    )
    print(make_table(results))
    if "groups" in results:
        print(make_table(results, "groups"))
    path = None

    def finish(saved: dict) -> None:  # the timing block, made just before the JSON
        add_timing(saved, results)  # the same block for the loggers

    if args.output_path:
        with phases.phase("write"):
            path = save_results(
                results,
                args.output_path,
                model_args=model_args,
                model_source=args.model,
                system_instruction=args.system_instruction,
                fewshot_as_multiturn=prepared.fewshot_as_multiturn
                if args.apply_chat_template
                else None,
                start_time=start,
                finish=finish,
            )
        print(f"Results written to {path}")
    else:
        add_timing(results)
    if prepared.loggers is not None:
        with phases.phase("write"):
            prepared.loggers.finish(results, path, model_name(model_args))
    print(phases.summary_line(clock.block()), file=sys.stderr)


def _add_model_arg(model_args: str, key: str, value: Any) -> str:
    if model_args.strip().startswith("{"):
        d = json.loads(model_args)
        d[key] = value
        return json.dumps(d)
    return f"{model_args},{key}={value}" if model_args else f"{key}={value}"
