"""`jaxeval report RESULTS... -o report.html`: one self-contained page from results folders or files.

    jaxeval report out/ -o report.html                          every run under out/
    jaxeval report out/llama out/qwen -o cmp.html --label llama --label qwen
    jaxeval report lm_eval_out/ jaxeval_out/ -o parity.html     lm-eval's files read as jaxeval's

The first run is the baseline (`--baseline N` picks another): each other run is compared with it
document by document when both logged samples (--log_samples).
"""

from __future__ import annotations

import argparse

from jaxeval.errors import JaxevalError
from jaxeval.report.html import write_report
from jaxeval.report.load import load_runs


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxeval report",
        description="One self-contained HTML page from results folders or files (docs/report.md).",
    )
    p.add_argument("results", nargs="+", metavar="RESULTS", help="results folders or files")
    p.add_argument("-o", "--output", default="report.html", help="the HTML file to write")
    p.add_argument("--label", action="append", default=None, help="a name per run, in order")
    p.add_argument("--baseline", type=int, default=0, help="index of the run compared with")
    p.add_argument(
        "--max_flips", type=int, default=50, help="changed documents shown per task and pair"
    )
    p.add_argument("--title", default="Evaluation report")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    runs = load_runs(args.results, args.label)
    if not 0 <= args.baseline < len(runs):
        raise JaxevalError(
            f"--baseline {args.baseline} is not a run index (there are {len(runs)} runs)",
            field="baseline",
            hint=f"give 0 to {len(runs) - 1}",
        )
    path = write_report(
        runs, args.output, title=args.title, baseline=args.baseline, max_flips=args.max_flips
    )
    tasks = {t for r in runs for t in r.tasks}
    print(f"Report written to {path} ({len(runs)} run(s), {len(tasks)} task(s))")
    return 0
