"""The `jaxeval` command's subcommands: one module each on `jaxeval.cli.base`, help that loads no
JAX, one `jaxeval plan` parser for both plans, and bad input as one paragraph and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jaxeval.cli import COMMANDS, SUBCOMMANDS, main
from jaxeval.cli.base import Subcommand, run_subcommand
from jaxeval.errors import JaxevalError

# `jaxeval --help` and `jaxeval NAME --help` for every name, in one fresh process through the
# console script's entry: the heavy modules each one imported
HELP_PROBE = """
import json, sys
import jaxeval.cli
from jaxeval.cli import SUBCOMMANDS, entry
jaxeval.cli._leave = lambda status: status  # one process for every command line
heavy = ("jax", "datasets", "torch", "transformers", "jaxeval.evaluator", "jaxeval.api.task_manager")
seen = {}
for argv in [["--help"], *([name, "--help"] for name in SUBCOMMANDS)]:
    sys.argv = ["jaxeval", *argv]
    try:
        entry()
    except SystemExit:
        pass
    seen[" ".join(argv)] = [m for m in heavy if m in sys.modules]
print(json.dumps(seen), file=sys.stderr)
"""


def test_help_loads_no_jax_nor_the_task_engine():
    out = subprocess.run(
        [sys.executable, "-c", HELP_PROBE], capture_output=True, text=True, check=True
    )
    seen = json.loads(out.stderr.strip().splitlines()[-1])
    assert set(seen) == {"--help", *(f"{name} --help" for name in SUBCOMMANDS)}
    assert all(loaded == [] for loaded in seen.values()), seen


# The command's process ends with os._exit once its output is flushed and its exit handlers ran.
EXIT_PROBE = """
import atexit, sys
from jaxeval.cli import entry
atexit.register(lambda: print("exit handler ran"))
sys.argv = ["jaxeval", *sys.argv[1:]]
sys.exit(entry())
"""


@pytest.mark.parametrize("argv, status", [(["--help"], 0), (["ls", "--nonsense"], 2)])
def test_the_command_leaves_with_its_output_and_exit_handlers(argv, status):
    out = subprocess.run([sys.executable, "-c", EXIT_PROBE, *argv], capture_output=True, text=True)
    assert out.returncode == status, out.stderr
    assert out.stdout.rstrip().endswith("exit handler ran")  # after the command's own output
    if status == 0:
        assert "jaxeval run" in out.stdout  # the help, block-buffered into a pipe, was flushed
    else:
        assert "--nonsense" in out.stderr


def test_every_subcommand_is_listed_in_the_help(capsys):
    assert SUBCOMMANDS == ("run", "ls", "tasks", "validate", "demo", "plan", "report")
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert all(f"jaxeval {name}" in text for name in SUBCOMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_subcommand_has_its_own_parser(name):
    command = COMMANDS[name]
    assert isinstance(command, Subcommand)
    prog = "jaxeval ls" if name == "tasks" else f"jaxeval {name}"  # `tasks` is `ls tasks`
    assert command.parser().prog == prog


def test_python_m_runs_the_command():
    out = subprocess.run(
        [sys.executable, "-m", "jaxeval.cli", "plan", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith("usage: jaxeval plan")


def test_plan_has_one_help_for_both_plans(capsys):
    with pytest.raises(SystemExit) as done:
        main(["plan", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    memory, tpu = (
        text.index("memory per device (without --topology):"),
        text.index("TPU slice (--topology):"),
    )
    assert "--device_memory" in text[memory:tpu] and "--devices" in text[memory:tpu]
    assert "--topology TOPOLOGY" in text[tpu:] and "--no_layer_costs" in text[tpu:]
    assert "--max_gen_toks" in text[tpu:] and "(default: 4096)" in text[tpu:]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--devices", "8", "--topology", "v5e-8"], "--devices: not with --topology"),
        (["--device_memory", "16", "--topology", "v5e-8"], "--device_memory: not with --topology"),
        (["--gen_slots", "8192", "--no_generation"], "--gen_slots, --no_generation: only with"),
        (["--attention", "xla"], "--attention: only with --topology NAME"),
    ],
)
def test_plan_refuses_the_other_plans_flags(argv, message, capsys):
    with pytest.raises(SystemExit) as done:
        main(["plan", "--model_args", "pretrained=DIR", *argv])
    assert done.value.code == 2
    assert f"jaxeval plan: error: {message}" in capsys.readouterr().err


def test_plan_accepts_a_slice_flag_at_its_default():
    command = COMMANDS["plan"]
    args = command.parse_args(["--model_args", "pretrained=DIR", "--gen_slots", "4096"])
    assert args.topology is None and args.gen_slots == 4096


def test_bad_input_is_one_paragraph_and_exit_2(capsys):
    class Failing(Subcommand):
        name = "failing"

        def add_arguments(self, parser):
            parser.add_argument("--why", default="no tasks given")

        def execute(self, args):
            raise JaxevalError(args.why, field="tasks", hint="pass --tasks")

    assert run_subcommand(Failing(), []) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.startswith("jaxeval: error: ") and "no tasks given" in err and "pass --tasks" in err


def test_interrupt_is_exit_130(capsys):
    class Interrupted(Subcommand):
        name = "interrupted"

        def add_arguments(self, parser):
            pass

        def execute(self, args):
            raise KeyboardInterrupt

    assert run_subcommand(Interrupted(), []) == 130
    assert capsys.readouterr().err == "jaxeval: interrupted; no results file was written\n"
