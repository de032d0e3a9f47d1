"""Read runs back (jaxeval's or lm-eval's results and samples files) and make one HTML report.

Public surface:
    load_runs(paths, labels=None) -> [Run]      results folders or files, samples beside them
    compare_runs(a, b) -> Comparison            paired tests and the documents that changed
    render_report(runs, ...) -> str, write_report(runs, out, ...) -> Path
    mcnemar_exact(b, c) -> p, paired_t(differences) -> (t, p)

The command: `jaxeval report RESULTS... -o report.html` (jaxeval/cli/report.py);
docs/report.md shows a report.
"""

from jaxeval.report.compare import Comparison, compare_runs
from jaxeval.report.html import render_report, write_report
from jaxeval.report.load import Run, load_runs
from jaxeval.report.stats import mcnemar_exact, paired_t

__all__ = [
    "Comparison",
    "Run",
    "compare_runs",
    "load_runs",
    "mcnemar_exact",
    "paired_t",
    "render_report",
    "write_report",
]
