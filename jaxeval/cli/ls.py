"""`jaxeval ls [tasks|groups|tags|subtasks]` (and `jaxeval tasks`): what the task index holds.

    jaxeval ls
    name          kind   source
    arc_easy      task   jaxeval: tasks/arc/arc_easy.yaml
    jaxeval_demo  tag    jaxeval: demo_arc_easy, demo_gsm8k, demo_hellaswag, demo_lambada, ...
    mmlu          group  jaxeval: tasks/mmlu/default/_mmlu.yaml

A source is the YAML file (jaxeval's, lm-eval's or one under `--include_path`), or a tag's members.
"""

from __future__ import annotations

import argparse

from jaxeval.cli.base import Subcommand


class LsCommand(Subcommand):
    name = "ls"
    description = "List the tasks, groups, tags or subtasks that --tasks can name."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "what", nargs="?", default="tasks", choices=["tasks", "groups", "tags", "subtasks"]
        )
        parser.add_argument("--include_path", default=None)

    def execute(self, args: argparse.Namespace) -> int:
        # start-up: the task engine loads only for the subcommands that use it
        from jaxeval.api.task_manager import Kind, TaskManager

        manager = TaskManager(args.include_path)
        kinds = {"tasks": None, "groups": Kind.GROUP, "tags": Kind.TAG, "subtasks": Kind.TASK}
        kind = kinds[args.what]
        rows = [r for r in manager.listing() if kind is None or r[1] == kind.value]
        width = max((len(r[0]) for r in rows), default=4)
        print(f"{'name'.ljust(width)}  kind   source")
        for name, kind_name, where in rows:
            print(f"{name.ljust(width)}  {kind_name.ljust(5)}  {where}")
        return 0


class TasksCommand(LsCommand):
    """`jaxeval tasks ...`: `jaxeval ls tasks ...` (the same parser, help and output)."""

    def __call__(self, argv: list[str]) -> int:
        return super().__call__(["tasks", *argv])
