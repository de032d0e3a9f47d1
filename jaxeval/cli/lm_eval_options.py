"""Every option of lm-evaluation-harness 0.4.13's `run`, `ls` and `validate`, and what jaxeval does
with it: the one table that `tests/cli/test_lm_eval_options.py` checks against lm-eval's own parser
and that docs/cli.md shows (`markdown_table()` writes it; a test keeps the two equal).

    OPTIONS["run"]["--tasks"]         Option(names=("--tasks", "-t"), status="accepted", note=...)
    OPTIONS["run"]["--trackio_args"]  Option(..., status="refused", note=why, instead=what to use)

An accepted option takes lm-eval's forms: lists space- or comma-separated (`--tasks a b`,
`--tasks a,b`), dict options as `k=v` words, comma-separated `k=v`, or one JSON object. A refused
option still parses, so the error names it and says what to use instead (`refusal`). An accepted
`run` option reaches the evaluator as the `jaxeval.run_config.RunConfig` field of its name, or is
one of the command's own (`jaxeval.cli.run_args.COMMAND_OPTIONS`; `tests/test_run_config.py`).
"""

from __future__ import annotations

import dataclasses

from jaxeval.errors import JaxevalError

ACCEPTED, REFUSED = "accepted", "refused"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Option:
    """One lm-eval option: its spellings (long first), jaxeval's status, and a note for users."""

    names: tuple[str, ...]
    status: str = ACCEPTED
    note: str = ""
    instead: str = ""  # refused options: what to use instead

    def __post_init__(self) -> None:
        if self.status not in (ACCEPTED, REFUSED):
            raise ValueError(f"status {self.status!r} is not {ACCEPTED!r} or {REFUSED!r}")
        if self.status == REFUSED and not (self.note and self.instead):
            raise ValueError(f"{self.names[0]}: a refused option needs a reason and an instead")


def _table(*options: Option) -> dict[str, Option]:
    return {o.names[0]: o for o in options}


DICT_FORMS = "`k=v` words, comma-separated `k=v`, or one JSON object; repeats merge"

OPTIONS: dict[str, dict[str, Option]] = {
    "run": _table(
        Option(names=("--config", "-C"), note="YAML of option names; the command line wins"),
        Option(names=("--tasks", "-t"), note="names, groups, tags or YAML paths; space or comma"),
        Option(names=("--model", "-M"), note="`jax` (default); `hf` is the same model"),
        Option(names=("--model_args", "-a"), note=DICT_FORMS + "; types checked before loading"),
        Option(names=("--apply_chat_template",), note="bare, or a template name"),
        Option(names=("--limit", "-L"), note="a count, or a fraction below 1; finite, positive"),
        Option(names=("--use_cache", "-c"), note="sqlite response cache, path prefix"),
        Option(names=("--num_fewshot", "-f")),
        Option(names=("--batch_size", "-b"), note="N, `auto` or `auto:N`"),
        Option(names=("--max_batch_size",)),
        Option(
            names=("--device",),
            note="the JAX platform: cpu, cuda/gpu or tpu, checked present; `:N` must exist "
            "(the run shards over every device of the platform)",
        ),
        Option(names=("--gen_kwargs",), note=DICT_FORMS),
        Option(names=("--output_path", "-o")),
        Option(names=("--log_samples", "-s")),
        Option(names=("--samples", "-E"), note="JSON object, or a file holding one"),
        Option(names=("--cache_requests",), note="true, refresh or delete (bare: true)"),
        Option(names=("--check_integrity",), note="renders every request first (`validate`)"),
        Option(names=("--system_instruction",)),
        Option(names=("--fewshot_as_multiturn",), note="bare, or true/false"),
        Option(names=("--include_path",)),
        Option(names=("--verbosity", "-v"), note="a logging level name"),
        Option(names=("--write_out", "-w")),
        Option(names=("--show_config",)),
        Option(names=("--wandb_args",), note=DICT_FORMS),
        Option(names=("--wandb_config_args",), note=DICT_FORMS),
        Option(
            names=("--trackio_args",),
            status=REFUSED,
            note="jaxeval has no Trackio logger",
            instead="write results with --output_path and upload them with your own tooling, "
            "or log to W&B (--wandb_args) or the Hugging Face Hub (--hf_hub_log_args)",
        ),
        Option(names=("--hf_hub_log_args",), note=DICT_FORMS),
        Option(names=("--predict_only", "-x")),
        Option(
            names=("--seed",),
            note="one integer or 3-4 comma-separated (`None` skips one); each `0..2**32-1`",
        ),
        Option(names=("--trust_remote_code",)),
        Option(names=("--confirm_run_unsafe_code",)),
        Option(names=("--metadata",), note=DICT_FORMS),
    ),
    "ls": _table(
        Option(names=("what",), note="tasks (default), groups, subtasks or tags"),
        Option(names=("--include_path",)),
    ),
    "validate": _table(
        Option(names=("--tasks", "-t"), note="renders every request, not only the names"),
        Option(names=("--include_path",)),
    ),
}

# jaxeval's own options beside lm-eval's (shown in docs/cli.md below the table)
JAXEVAL_ONLY: dict[str, dict[str, str]] = {
    "run": {
        "--data_dir": "local copies of hub datasets, `DIR/<repo>/[<config>/]<split>.jsonl`",
        "--bootstrap_iters": "bootstrap resamples for standard errors (simple_evaluate's)",
        "--compilation_cache": "JAX's persistent compilation cache folder, or `off`",
        "--distributed": "join a multi-process run (jax.distributed)",
    },
    "ls": {},
    "validate": {"--data_dir": "as for `run`"},
}


def refused(command: str) -> list[Option]:
    """The options of `command` jaxeval refuses."""
    return [o for o in OPTIONS[command].values() if o.status == REFUSED]


def refusal(command: str, given: dict[str, object]) -> None:
    """Raises for the first refused option of `command` given a value (dest name -> value)."""
    for option in refused(command):
        dest = option.names[0].lstrip("-")
        if given.get(dest) is not None:
            raise JaxevalError(
                f"{option.names[0]} is not supported by jaxeval ({option.note})",
                field=dest,
                hint=option.instead,
            )


def markdown_table() -> str:
    """docs/cli.md's table: one row per lm-eval option of each command, then jaxeval's own."""
    lines = ["| command | option | in jaxeval | notes |", "|---|---|---|---|"]
    for command, options in OPTIONS.items():
        for option in options.values():
            names = ", ".join(f"`{n}`" for n in option.names)
            note = option.note
            if option.status == REFUSED:
                note = f"{note}; instead: {option.instead}"
            lines.append(f"| {command} | {names} | {option.status} | {note} |")
    for command, options in JAXEVAL_ONLY.items():
        for name, note in options.items():
            lines.append(f"| {command} | `{name}` | jaxeval only | {note} |")
    return "\n".join(lines) + "\n"
