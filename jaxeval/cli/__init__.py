"""`jaxeval`: lm_eval's command line, so a user switches by renaming the command.

    jaxeval run --model jax --model_args pretrained=DIR,dtype=bfloat16 --tasks arc_easy,mmlu \\
        --num_fewshot 5 --batch_size auto --output_path out/ --log_samples
    jaxeval --model hf --model_args pretrained=DIR --tasks lambada_openai   (legacy form: `run` implied)
    jaxeval run --model_args pretrained=DIR dtype=float32 --tasks arc_easy hellaswag \\
        --metadata max_seq_lengths=[4096]   (lm-eval 0.4.13's forms; every option: docs/cli.md)
    jaxeval ls tasks | groups | tags | subtasks        jaxeval tasks        jaxeval validate --tasks T
    jaxeval demo                                        (offline: tiny model + bundled task)
    jaxeval plan --model_args pretrained=DIR --mesh fsdp --devices 8   (memory per device from
                                     config.json alone: parameters, activations, KV cache)
    jaxeval plan --model_args pretrained=DIR --topology v5e-8   (every executable of a run
                                     compiled for a TPU slice on this host)
    jaxeval report out/ other_out/ -o report.html   (one self-contained page: results table,
                                     charts, paired tests and the documents that changed)
    jaxeval run ... --wandb_args project=P --hf_hub_log_args hub_results_org=ORG,push_results_to_hub=True
    jaxeval run --distributed ...   (one per process; also implied by JAXEVAL_COORDINATOR=host:port
                                     with JAXEVAL_NUM_PROCESSES and JAXEVAL_PROCESS_ID): one mesh over
                                     every process's devices; only process 0 writes and prints

Bad input prints one paragraph (what, where, what to do) and exits 2; no results file is written.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading

from jaxeval.cli.base import Subcommand, run_subcommand
from jaxeval.cli.demo import DemoCommand
from jaxeval.cli.ls import LsCommand, TasksCommand
from jaxeval.cli.plan import PlanCommand
from jaxeval.cli.report import ReportCommand
from jaxeval.cli.run import RunCommand
from jaxeval.cli.startup import hide_torch_from_transformers, quiet_transformers_advice
from jaxeval.cli.validate import ValidateCommand
from jaxeval.platform import phases
from jaxeval.platform.tpu_host import quiet_absent_tpu

__all__ = ["COMMANDS", "SUBCOMMANDS", "Subcommand", "entry", "main"]

# `jaxeval NAME ...` runs COMMANDS[NAME]; anything else is `jaxeval run ...` (lm-eval's legacy form)
COMMANDS: dict[str, Subcommand] = {
    "run": RunCommand(),
    "ls": LsCommand(),
    "tasks": TasksCommand(),  # `jaxeval ls tasks`
    "validate": ValidateCommand(),
    "demo": DemoCommand(),
    "plan": PlanCommand(),
    "report": ReportCommand(),
}
SUBCOMMANDS = tuple(COMMANDS)
# libraries whose loggers carry a stderr handler of their own
OWN_HANDLERS = ("huggingface_hub", "datasets")


def main(argv: list[str] | None = None) -> int:
    """`jaxeval ARGS...` in this process (`argv` defaults to the command line's): the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=os.environ.get("JAXEVAL_LOG_LEVEL", "WARNING").upper(),
        format="%(levelname)s %(name)s: %(message)s",
    )
    for library in OWN_HANDLERS:  # each prints its lines itself; through the root too, twice
        logging.getLogger(library).propagate = False
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv[0] in COMMANDS:
        return run_subcommand(COMMANDS[argv[0]], argv[1:])
    return run_subcommand(COMMANDS["run"], argv)


def entry() -> int:
    """The `jaxeval` command and `python -m jaxeval`: a process of its own, so transformers is told
    first that torch is absent (`jaxeval.cli.startup`) and libtpu that no TPU is attached where none
    is (`jaxeval.platform.tpu_host`), then `main` runs."""
    quiet_transformers_advice()  # before transformers is first imported
    hide_torch_from_transformers()
    quiet_absent_tpu()
    phases.mark_command()  # a run's timing block counts from this process's start
    return _leave(main())


def _leave(status: int) -> int:
    """Ends the command's process as soon as its work is done: output flushed and the exit
    handlers run (`atexit`: loggers, trackers), then `os._exit`, without the interpreter's
    teardown of every module and buffer, which takes ~0.4 s after a run with JAX loaded and
    writes nothing. Where a thread that is not a daemon still runs (it would be joined at a
    normal exit) or the output cannot be flushed, the process exits the usual way."""
    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return status
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed or broken stream: Python's own exit reports it
        return status
    os._exit(status)
