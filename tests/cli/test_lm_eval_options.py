"""lm-eval 0.4.13's own parser, walked option by option: each is accepted by the same `jaxeval`
subcommand under every spelling, or refused by name; docs/cli.md shows the same table."""

from __future__ import annotations

import argparse
import pathlib

import pytest

from jaxeval.cli import COMMANDS, main
from jaxeval.cli.lm_eval_options import ACCEPTED, OPTIONS, REFUSED, markdown_table

REPO = pathlib.Path(__file__).resolve().parents[2]


def lm_eval_subparsers() -> dict[str, argparse.ArgumentParser]:
    from lm_eval._cli.harness import HarnessCLI

    return dict(HarnessCLI()._subparsers.choices)


def lm_eval_options(parser: argparse.ArgumentParser) -> dict[str, tuple[str, ...]]:
    """First spelling -> every spelling, for each option and positional but help."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        names = tuple(action.option_strings) or (action.dest,)
        out[names[0]] = names
    return out


def test_lm_eval_has_the_subcommands_the_table_covers():
    assert set(lm_eval_subparsers()) == set(OPTIONS) == {"run", "ls", "validate"}


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_every_lm_eval_option_is_in_the_table_with_its_spellings(command):
    theirs = lm_eval_options(lm_eval_subparsers()[command])
    ours = {name: option.names for name, option in OPTIONS[command].items()}
    missing = sorted(set(theirs) - set(ours))
    assert not missing, f"lm_eval {command} options jaxeval neither accepts nor refuses: {missing}"
    assert not sorted(set(ours) - set(theirs)), "options lm-eval no longer has"
    for name, spellings in theirs.items():
        assert set(ours[name]) == set(spellings), name


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_jaxeval_parses_every_spelling(command):
    parser = COMMANDS[command].parser()
    ours = lm_eval_options(parser)
    for option in OPTIONS[command].values():
        if option.names[0].startswith("-"):
            assert all(n in parser._option_string_actions for n in option.names), option.names
        else:
            assert option.names[0] in ours, option.names  # a positional


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_list_and_dict_options_take_several_words_as_in_lm_eval(command):
    """Where lm-eval takes `nargs="+"` (space-separated words), so does jaxeval."""
    theirs = {
        a.option_strings[0]: a
        for a in lm_eval_subparsers()[command]._actions
        if a.option_strings and not isinstance(a, argparse._HelpAction)
    }
    parser = COMMANDS[command].parser()
    for name, action in theirs.items():
        if OPTIONS[command][name].status == ACCEPTED and action.nargs == "+":
            assert parser._option_string_actions[name].nargs == "+", name


@pytest.mark.parametrize(
    "command, option",
    [(c, o) for c, table in sorted(OPTIONS.items()) for o in table.values() if o.status == REFUSED],
)
def test_a_refused_option_is_named_with_what_to_use_instead(command, option, capsys):
    argv = [command, option.names[0], "project=x"]
    if command == "run":
        argv += ["--model", "never", "--tasks", "arc_easy"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{option.names[0]} is not supported by jaxeval" in err
    assert option.instead in err.replace("\n", " ").replace("  What to do: ", "")
    assert "Traceback" not in err


def test_docs_cli_shows_the_table():
    text = (REPO / "docs" / "cli.md").read_text()
    assert markdown_table() in text, "regenerate docs/cli.md's table: markdown_table()"
    for command, table in OPTIONS.items():
        for name in table:
            assert f"| {command} | `{name}`" in markdown_table()


def test_readme_links_the_cli_page():
    assert "docs/cli.md" in (REPO / "README.md").read_text()
