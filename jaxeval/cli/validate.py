"""`jaxeval validate --tasks T[,T2...]`: load tasks and render every request, no model needed.

    jaxeval validate --tasks arc_easy,mmlu --data_dir data/
    arc_easy: 2376 requests from 2376 documents: OK

`jaxeval run --check_integrity` runs the same check (`validate_tasks`) before it evaluates.
"""

from __future__ import annotations

import argparse
from typing import Any

from jaxeval.cli.base import Subcommand


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
        parser.add_argument("--tasks", "-t", required=True)
        parser.add_argument("--include_path", default=None)
        parser.add_argument("--data_dir", default=None)

    def execute(self, args: argparse.Namespace) -> int:
        # start-up: the task engine loads only for the subcommands that use it
        from jaxeval.api.task_manager import TaskManager

        manager = TaskManager(args.include_path, data_dir=args.data_dir)
        validate_tasks(manager, args.tasks.split(","))
        return 0
