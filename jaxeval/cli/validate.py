"""`jaxeval validate --tasks T[,T2...]`: load tasks and render every request, no model needed.

    jaxeval validate --tasks arc_easy,mmlu --data_dir data/     (or --tasks arc_easy mmlu)
    arc_easy: 2376 requests from 2376 documents: OK

A dataset the hub would serve is read from the local cache when the hub cannot be reached
(`jaxeval.cli.hub`): offline, that fails in a second and says to give `--data_dir`.

`jaxeval run --check_integrity` runs the same check (`validate_tasks`) before it evaluates.
"""

from __future__ import annotations

import argparse
from typing import Any

from jaxeval.cli.base import Subcommand
from jaxeval.cli.hub import offline_unless_reachable
from jaxeval.cli.run_args import ListArgs


def validate_tasks(manager: Any, names: list[str]) -> None:
    """Loads `names` through the `TaskManager` and builds every request, printing a line per task;
    bad input raises (`JaxevalError`)."""
    loaded = manager.load(names)
    for task in loaded.tasks.values():
        task.build_all_requests(limit=None)
        print(
            f"{task.name}: {len(task.instances)} requests from {len(task.eval_docs)} documents: OK"
        )


class ValidateCommand(Subcommand):
    name = "validate"
    description = "Load tasks and render every request, without a model."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--tasks",
            "-t",
            required=True,
            nargs="+",
            action=ListArgs,
            metavar="TASK",
            help="task, group or tag names or YAML paths, space- or comma-separated",
        )
        parser.add_argument("--include_path", default=None)
        parser.add_argument(
            "--data_dir",
            default=None,
            help="local copies of hub datasets, laid out DIR/<repo>/[<config>/]<split>.jsonl",
        )

    def execute(self, args: argparse.Namespace) -> int:
        # start-up: the task engine loads only for the subcommands that use it
        from jaxeval.api.task_manager import TaskManager

        offline_unless_reachable()
        manager = TaskManager(args.include_path, data_dir=args.data_dir)
        validate_tasks(manager, list(args.tasks))
        return 0
