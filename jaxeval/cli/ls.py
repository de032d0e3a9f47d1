"""`jaxeval ls [tasks|groups|tags|subtasks]` (and `jaxeval tasks`): what the task index holds.

    jaxeval ls
    name          kind   source
    arc_easy      task   jaxeval: tasks/arc/arc_easy.yaml
    jaxeval_demo  tag    jaxeval: demo_arc_easy, demo_gsm8k, demo_hellaswag, demo_lambada, ...
    mmlu          group  lm-eval: tasks/mmlu/default/_mmlu.yaml

A source is the YAML file (jaxeval's, lm-eval's or one under `--include_path`), or a tag's members.
A file is shown from its catalogue's folder (`tasks/...`), or from the `--include_path` folder as
given. The name column is as wide as the names, up to `NAME_WIDTH`: a longer name pushes only
its own row's columns out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from jaxeval.cli.base import Subcommand

NAME_WIDTH = 40  # the widest name column; a few catalogue names run to 88 characters


def short_source(source: str, roots: list[Path]) -> str:
    """`"lm-eval: /site-packages/lm_eval/tasks/arc/arc_easy.yaml"` -> `"lm-eval: tasks/arc/..."`:
    a YAML path shown from its catalogue's folder (an `--include_path` folder: as given)."""
    label, sep, where = source.partition(": ")
    if not sep or not Path(where).is_absolute():
        return source
    path = Path(where)
    for root in sorted(roots, key=lambda r: len(str(r)), reverse=True):
        absolute = root.resolve()
        if path.is_relative_to(absolute):
            top = str(root) if label == "include" else root.name
            return f"{label}: {Path(top) / path.relative_to(absolute)}"
    return source


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
        width = min(max((len(r[0]) for r in rows), default=4), NAME_WIDTH)
        print(f"{'name'.ljust(width)}  kind   source")
        for name, kind_name, where in rows:
            print(
                f"{name.ljust(width)}  {kind_name.ljust(5)}  {short_source(where, manager.paths)}"
            )
        return 0


class TasksCommand(LsCommand):
    """`jaxeval tasks ...`: `jaxeval ls tasks ...` (the same parser, help and output)."""

    def __call__(self, argv: list[str]) -> int:
        return super().__call__(["tasks", *argv])
