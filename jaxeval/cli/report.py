"""`jaxeval report RESULTS... -o report.html`: one self-contained page from results folders or files.

    jaxeval report out/ -o report.html                          every run under out/
    jaxeval report out/llama out/qwen -o cmp.html --label llama --label qwen
    jaxeval report lm_eval_out/ jaxeval_out/ -o parity.html     lm-eval's files read as jaxeval's

`-o` may name a file in folders that do not exist yet: they are created, as lm-eval creates
`--output_path`'s. The first run is the baseline (`--baseline N` picks another): each other run is compared with it
document by document when both logged samples (--log_samples). The runs are read by
`jaxeval.report.load_runs` and the page written by `jaxeval.report.write_report`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from jaxeval.cli.base import Subcommand
from jaxeval.errors import JaxevalError


class ReportCommand(Subcommand):
    name = "report"
    description = "One self-contained HTML page from results folders or files (docs/report.md)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        a = parser.add_argument
        a("results", nargs="+", metavar="RESULTS", help="results folders or files")
        a("-o", "--output", default="report.html", help="the HTML file to write")
        a("--label", action="append", default=None, help="a name per run, in order")
        a("--baseline", type=int, default=0, help="index of the run compared with")
        a("--max_flips", type=int, default=50, help="changed documents shown per task and pair")
        a("--title", default="Evaluation report")

    def execute(self, args: argparse.Namespace) -> int:
        # start-up: the report's readers and page load only when asked for
        from jaxeval.report import load_runs, write_report

        runs = load_runs(args.results, args.label)
        if not 0 <= args.baseline < len(runs):
            raise JaxevalError(
                f"--baseline {args.baseline} is not a run index (there are {len(runs)} runs)",
                field="baseline",
                hint=f"give 0 to {len(runs) - 1}",
            )
        _make_parent(args.output)
        try:
            path = write_report(
                runs,
                args.output,
                title=args.title,
                baseline=args.baseline,
                max_flips=args.max_flips,
            )
        except OSError as e:
            raise JaxevalError(
                f"cannot write the report {args.output} ({e.strerror or e})",
                field="output",
                hint="give -o a file name in a writable location",
            ) from None
        tasks = {t for r in runs for t in r.tasks}
        print(f"Report written to {path} ({len(runs)} run(s), {len(tasks)} task(s))")
        return 0


def _make_parent(output: str) -> None:
    """Creates the folders `-o` names; `-o` a folder, a file in the way or no permission is a
    `JaxevalError`."""
    if Path(output).expanduser().is_dir():
        raise JaxevalError(
            f"-o {output} is a folder; -o names the HTML file to write",
            field="output",
            hint=f"give a file name, e.g. -o {Path(output) / 'report.html'}",
        )
    parent = Path(output).expanduser().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise JaxevalError(
            f"cannot create the folder {parent}: a file is in the way",
            field="output",
            hint="give -o a file name in a folder (existing or new)",
        ) from None
    except OSError as e:
        raise JaxevalError(
            f"cannot create the folder {parent} ({e.strerror or e})",
            field="output",
            hint="give -o a file name in a writable location",
        ) from None
