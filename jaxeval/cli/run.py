"""`jaxeval run` (also `jaxeval --model ... --tasks ...`, lm-eval's legacy form): evaluate a model
on tasks with lm-eval's flags, print lm-eval's table, write its results and samples files.

    jaxeval run --model jax --model_args pretrained=DIR,dtype=bfloat16 --tasks arc_easy,mmlu \\
        --num_fewshot 5 --batch_size auto --output_path out/ --log_samples
    jaxeval run --config run.yaml --limit 10        (the YAML's keys are flags; the command line wins)

Checks that need no model come first (`--log_samples` without `--output_path`, a results folder
that cannot be written, a bad tracker flag), so bad input fails in seconds, before the model loads.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from typing import Any

from jaxeval.cli.base import Subcommand
from jaxeval.cli.validate import validate_tasks
from jaxeval.errors import JaxevalError


def _limit(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--limit {text!r} is not a number") from None


def _batch_size(text: str) -> str | int:
    if text == "auto":
        return text
    if text.startswith("auto:"):
        try:
            ok = int(text[5:]) >= 1
        except ValueError:
            ok = False
        if not ok:
            raise argparse.ArgumentTypeError(
                f"--batch_size {text!r}: in 'auto:N', N is how many times to re-estimate the batch "
                "size and must be a positive integer (e.g. auto:4)"
            )
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--batch_size {text!r}: give an integer, 'auto' or 'auto:N'"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError("--batch_size must be at least 1")
    return value


def _bool_flag(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def _seeds(text: str) -> list[int | None]:
    parts = text.split(",")
    if len(parts) == 1:
        parts = parts * 4
    if len(parts) != 4:
        raise argparse.ArgumentTypeError("--seed takes one integer or four comma-separated values")
    out: list[int | None] = []
    for p in parts:
        if p.strip().lower() == "none":
            out.append(None)
            continue
        try:
            out.append(int(p))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--seed value {p!r} is not an integer or None"
            ) from None
    return out


# lm_eval flags that send results to outside services jaxeval does not talk to; accepted so the
# error can say why.
UNSUPPORTED = ("--trackio_args",)


def _reject_unsupported(args: argparse.Namespace) -> None:
    for flag in UNSUPPORTED:
        if getattr(args, flag.lstrip("-")) is not None:
            raise JaxevalError(
                f"{flag} is not supported by jaxeval (it uploads results to an outside service)",
                field=flag.lstrip("-"),
                hint="write results with --output_path and upload them with your own tooling, "
                "or log to W&B (--wandb_args) or the Hugging Face Hub (--hf_hub_log_args)",
            )


def _select_device(device: str | None) -> None:
    """--device cpu|cuda|gpu|tpu[:N] picks the JAX platform (before JAX starts); None keeps the default."""
    if not device:
        return
    platform = device.split(":")[0].lower()
    platform = {"cuda": "cuda", "gpu": "cuda", "cpu": "cpu", "tpu": "tpu", "mps": None}.get(
        platform
    )
    if platform is None:
        raise JaxevalError(
            f"--device {device!r} is not a JAX platform",
            field="device",
            hint="use cpu, cuda (or gpu) or tpu; jaxeval shards over every device of that platform",
        )
    import jax

    jax.config.update("jax_platforms", platform)


def _apply_config_file(args: argparse.Namespace, argv: list[str]) -> None:
    if not args.config:
        return
    import yaml

    try:
        with open(args.config, encoding="utf-8") as fh:
            values = yaml.safe_load(fh) or {}
    except OSError as e:
        raise JaxevalError(f"cannot read --config: {e}", file=args.config) from None
    given = {tok.lstrip("-").split("=")[0] for tok in argv if tok.startswith("-")}
    for key, value in values.items():
        if not hasattr(args, key):
            raise JaxevalError("unknown key in --config file", file=args.config, field=key)
        if key not in given:
            setattr(args, key, value)


def _parse_samples(text: str | None) -> dict[str, list[int]] | None:
    if text is None:
        return None
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
    description = "Evaluate a model on tasks."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        a = parser.add_argument
        a("--config", "-C", default=None, help="YAML file with arguments (command line wins)")
        a("--model", "-M", default="jax", help="model name: jax (alias hf)")
        a("--model_args", "-a", default="", help="k=v,k2=v2 or a JSON object")
        a(
            "--tasks",
            "-t",
            default=None,
            help="task, group or tag names, YAML paths, comma-separated",
        )
        a("--num_fewshot", "-f", type=int, default=None)
        a("--batch_size", "-b", type=_batch_size, default=1)
        a("--max_batch_size", type=int, default=None)
        a(
            "--device",
            default=None,
            help="JAX platform: cpu, cuda/gpu or tpu (default: JAX's choice)",
        )
        a("--output_path", "-o", default=None)
        a("--limit", "-L", type=_limit, default=None)
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
        a("--fewshot_as_multiturn", nargs="?", const=True, type=_bool_flag, default=None)
        a("--show_config", action="store_true")
        a("--include_path", default=None)
        a(
            "--data_dir",
            default=None,
            help="local copies of hub datasets, laid out DIR/<repo>/[<config>/]<split>.jsonl",
        )
        a(
            "--gen_kwargs",
            nargs="*",
            default=None,
            help="k=v pairs merged into every generation task",
        )
        a("--verbosity", "-v", default=None)
        a("--predict_only", "-x", action="store_true")
        a("--seed", type=_seeds, default=[0, 1234, 1234, 1234])
        a("--trust_remote_code", action="store_true")
        a("--confirm_run_unsafe_code", action="store_true")
        a("--metadata", default=None, help="JSON merged into every task's metadata")
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
            a(flag, nargs="+", default=None, help=what)
        for flag in UNSUPPORTED:
            a(flag, nargs="*", default=None, help=argparse.SUPPRESS)

    def parse_args(self, argv: list[str]) -> argparse.Namespace:
        args = super().parse_args(argv)
        _apply_config_file(args, argv)
        return args

    def execute(self, args: argparse.Namespace) -> int:
        # start-up: each subcommand loads only what it runs (`jaxeval --help` needs none of these)
        from jaxeval.api.task_manager import TaskManager
        from jaxeval.evaluator import simple_evaluate
        from jaxeval.lm.args import parse_model_args
        from jaxeval.platform import distributed
        from jaxeval.preflight import check_output_path
        from jaxeval.results.files import make_table, model_name, save_results
        from jaxeval.trackers.run_loggers import RunLoggers

        _reject_unsupported(args)
        _select_device(args.device)
        if args.compilation_cache is not None:  # read by platform.compile_cache at model load
            os.environ["JAXEVAL_COMPILATION_CACHE"] = args.compilation_cache
        main_process = True
        if args.distributed or distributed.requested_by_env():
            distributed.initialize()  # before anything touches JAX devices
            main_process = distributed.is_main_process()
        if args.verbosity:
            logging.getLogger().setLevel(args.verbosity.upper())
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
        fewshot_as_multiturn = args.fewshot_as_multiturn
        if fewshot_as_multiturn is None:
            fewshot_as_multiturn = bool(args.apply_chat_template)
        if args.trust_remote_code:
            os.environ["HF_DATASETS_TRUST_REMOTE_CODE"] = "1"
            args.model_args = _add_model_arg(args.model_args, "trust_remote_code", True)
        if args.confirm_run_unsafe_code:
            # catalogue helpers that score code (humaneval, mbpp) run it through code_eval, which
            # refuses without this variable, even while the helper is imported
            os.environ.setdefault("HF_ALLOW_CODE_EVAL", "1")
        metadata = json.loads(args.metadata) if args.metadata else None
        task_list = (
            [t.strip() for t in args.tasks.split(",") if t.strip()]
            if isinstance(args.tasks, str)
            else list(args.tasks)
        )
        gen_kwargs = ",".join(args.gen_kwargs) if args.gen_kwargs else None
        meta = {**parse_model_args(args.model_args), **(metadata or {})}
        samples = _parse_samples(args.samples)
        loggers = None
        if main_process:  # before the tasks and the model load: a run must not fail only when it
            # saves, and a bad tracker flag or an unreachable Hub fails in seconds
            check_output_path(args.output_path)
            loggers = RunLoggers.start(
                wandb_args=args.wandb_args,
                wandb_config_args=args.wandb_config_args,
                hf_hub_log_args=args.hf_hub_log_args,
                output_path=args.output_path,
                log_samples=args.log_samples,
                model_source=args.model,
            )
        tm = TaskManager(args.include_path, metadata=meta, data_dir=args.data_dir)
        if args.check_integrity and main_process:
            validate_tasks(tm, task_list)
        start = time.time()
        passed = ("model", "model_args", "num_fewshot", "batch_size", "max_batch_size", "device")
        passed += ("use_cache", "limit", "bootstrap_iters", "write_out", "log_samples")
        passed += ("system_instruction", "apply_chat_template", "predict_only")
        passed += ("confirm_run_unsafe_code",)
        seeds = ("random_seed", "numpy_random_seed", "torch_random_seed", "fewshot_random_seed")
        results = simple_evaluate(
            **{name: getattr(args, name) for name in passed},
            **dict(zip(seeds, args.seed)),
            tasks=task_list,
            cache_requests=args.cache_requests in ("true", "refresh", "delete"),
            rewrite_requests_cache=args.cache_requests == "refresh",
            delete_requests_cache=args.cache_requests == "delete",
            samples=samples,
            fewshot_as_multiturn=fewshot_as_multiturn,
            gen_kwargs=gen_kwargs,
            task_manager=tm,
            metadata=metadata,
        )
        if results is None:  # another process of a multi-process run reports
            return 0
        if args.show_config:
            shown = {k: v for k, v in results.items() if k != "samples"}
            print(json.dumps(shown, indent=2, default=str, ensure_ascii=False))
        path = None
        if args.output_path:
            path = save_results(
                results,
                args.output_path,
                model_args=args.model_args,
                model_source=args.model,
                system_instruction=args.system_instruction,
                fewshot_as_multiturn=fewshot_as_multiturn if args.apply_chat_template else None,
                start_time=start,
            )
            print(f"Results written to {path}")
        print(
            f"{args.model} ({args.model_args}), gen_kwargs: ({gen_kwargs}), limit: {args.limit}, "
            f"num_fewshot: {args.num_fewshot}, batch_size: {args.batch_size}"
        )
        print(make_table(results))
        if "groups" in results:
            print(make_table(results, "groups"))
        if loggers is not None:
            loggers.finish(results, path, model_name(args.model_args))
        return 0


def _add_model_arg(model_args: str, key: str, value: Any) -> str:
    if model_args.strip().startswith("{"):
        d = json.loads(model_args)
        d[key] = value
        return json.dumps(d)
    return f"{model_args},{key}={value}" if model_args else f"{key}={value}"
