"""One `jaxeval` subcommand: its name, its arguments, what it runs; and how bad input is reported.

Each subcommand is a module of `jaxeval.cli` holding one `Subcommand` (after lm-eval's
`lm_eval/_cli/subcommand.py`): the parser is built from `name`, `description` and
`add_arguments`, and `execute` runs the parsed arguments through library functions that take
values (`jaxeval.plan.memory.print_memory_plan`, `jaxeval.demo.run.run_demo`, ...). `execute`
imports what it runs inside itself, so `jaxeval --help` and `jaxeval NAME --help` load neither
JAX nor the task engine.

    jaxeval plan --model_args pretrained=DIR --json
        run_subcommand(PlanCommand(), ["--model_args", "pretrained=DIR", "--json"])
          -> parse_args(argv)   Namespace(model_args="pretrained=DIR", json=True, ...)
          -> execute(args)      0 (the exit status)

Bad input anywhere, a `JaxevalError`, prints one paragraph on stderr (what, where, what to do) and
exits 2, never a traceback; Ctrl-C exits 130 saying no results file was written. A flag argparse
refuses (unknown, or a value its type rejects) exits 2 the same way, as one paragraph:

    jaxeval run: error: argument --limit/-L: --limit 'ten' is not a number (...)
      What to do: see `jaxeval run --help` for the accepted forms (docs/cli.md)
"""

from __future__ import annotations

import abc
import argparse
import os
import sys
from typing import ClassVar

from jaxeval.errors import JaxevalError

BAD_INPUT = 2  # exit status of a JaxevalError (and of argparse's usage errors)
INTERRUPTED = 130  # exit status of Ctrl-C (128 + SIGINT)
BROKEN_PIPE = 141  # exit status when stdout's reader has gone (128 + SIGPIPE)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one paragraph (module docstring), exit 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(
            BAD_INPUT,
            f"{self.prog}: error: {message}\n"
            f"  What to do: see `{self.prog} --help` for the accepted forms (docs/cli.md)\n",
        )


class Subcommand(abc.ABC):
    """`jaxeval NAME ...`: a parser (`prog` "jaxeval NAME") and `execute(args) -> exit status`."""

    name: ClassVar[str]
    description: ClassVar[str | None] = None
    epilog: ClassVar[str | None] = None
    formatter_class: ClassVar[type[argparse.HelpFormatter]] = argparse.HelpFormatter

    def parser(self) -> argparse.ArgumentParser:
        parser = ArgumentParser(
            prog=f"jaxeval {self.name}",
            description=self.description,
            epilog=self.epilog,
            formatter_class=self.formatter_class,
        )
        self.add_arguments(parser)
        return parser

    def parse_args(self, argv: list[str]) -> argparse.Namespace:
        return self.parser().parse_args(argv)

    @abc.abstractmethod
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Adds this subcommand's flags to `parser`."""

    @abc.abstractmethod
    def execute(self, args: argparse.Namespace) -> int:
        """Runs the parsed arguments; the exit status."""

    def __call__(self, argv: list[str]) -> int:
        return self.execute(self.parse_args(argv))


def run_subcommand(command: Subcommand, argv: list[str]) -> int:
    """`command` on `argv`: its exit status, with bad input and Ctrl-C reported (module docstring)."""
    try:
        return command(argv)
    except JaxevalError as e:
        print(f"jaxeval: error: {e}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        print("jaxeval: interrupted; no results file was written", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # `jaxeval ls | head`: the reader left; stop quietly, as `cat` does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit must not fail again
        return BROKEN_PIPE
