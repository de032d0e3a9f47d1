"""`jaxeval run`'s arguments in lm-eval 0.4.13's forms, a `--config` YAML beneath them, and every
value checked before a task or the model loads.

    --tasks arc_easy hellaswag  ==  --tasks arc_easy,hellaswag  ==  --tasks arc_easy --tasks hellaswag
        -> ["arc_easy", "hellaswag"]                                  (`ListArgs`)
    --model_args pretrained=X dtype=float32  ==  --model_args pretrained=X,dtype=float32
        -> ["pretrained=X", "dtype=float32"], then model_args_text() "pretrained=X,dtype=float32"
    --metadata max_seq_lengths=[4096,8192]  ==  --metadata '{"max_seq_lengths": [4096, 8192]}'
        -> dict_arg() {"max_seq_lengths": [4096, 8192]}              (`WordArgs`)

`parse_run_args` parses into a namespace whose every option starts `UNSET`, so it knows which
options the command line gave: a `--config` YAML fills the others (lm-eval's precedence: command
line, then YAML, then the defaults), its values typed as the command line's would be. A bad value,
from either, is a `JaxevalError` naming the option; `check_values` checks the rest (`--limit`,
`--seed`, `--verbosity`, `--compilation_cache`) so no traceback ever comes from a flag. The options
named as run arguments fill `jaxeval.run_config.RunConfig` as given; `seed_fields` and
`cache_request_fields` turn `--seed` and `--cache_requests` into theirs.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import math
from pathlib import Path
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.lm.args import parse_model_args
from jaxeval.trackers.args import merge_dict_args

log = logging.getLogger(__name__)

UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET"})()
DEFAULT_SEED = (0, 1234, 1234, 1234)  # random, numpy, torch, few-shot: lm-eval's
SEED_MAX = 2**32 - 1  # numpy's seeds are 0..2**32-1
LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL", "NOTSET")


class ListArgs(argparse.Action):
    """nargs="+": every word split on commas, repeats appended (lm-eval's `SplitArgs`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = getattr(namespace, self.dest, None)
        items = [] if items in (None, UNSET) else list(items)
        items.extend(part.strip() for word in values for part in word.split(",") if part.strip())
        setattr(namespace, self.dest, items)


class WordArgs(argparse.Action):
    """nargs="+": the words kept as given, repeats appended; `dict_arg` reads them as lm-eval's
    `MergeDictAction` does (one JSON object, else `k=v` words with comma-separated pairs)."""

    def __call__(self, parser, namespace, values, option_string=None):
        words = getattr(namespace, self.dest, None)
        words = [] if words in (None, UNSET) else list(words)
        setattr(namespace, self.dest, [*words, *values])


def dict_arg(value: Any, flag: str) -> dict[str, Any]:
    """The dict a `WordArgs` option (or its `--config` value) gives; {} when absent."""
    return merge_dict_args(value, flag)


def model_args_text(value: Any) -> str:
    """`--model_args` as the one string the evaluator and the results file take: the words joined
    with commas when that reads back the same, else the merged dict as JSON."""
    if not value:
        return ""
    if isinstance(value, dict):
        return json.dumps(value)
    words = [value] if isinstance(value, str) else list(value)
    joined = ",".join(words)
    try:
        merged = dict_arg(words, "model_args")
    except JaxevalError:
        parse_model_args(joined)  # the evaluator's own message, where it has one
        raise
    if len(words) == 1 and words[0].strip().startswith("{"):
        return words[0]
    try:
        same = parse_model_args(joined) == merged
    except JaxevalError:  # commas inside a value: `k={"a": 1, "b": 2}`
        same = False
    return joined if same else json.dumps(merged)


def limit_value(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--limit {text!r} is not a number (a count, or a fraction below 1)"
        ) from None


def batch_size_value(text: str) -> str | int:
    if text == "auto":
        return text
    if text.startswith("auto:"):
        try:
            ok = int(text[5:]) >= 1
        except ValueError:
            ok = False
        if not ok:
            raise argparse.ArgumentTypeError(
                f"--batch_size {text!r}: in 'auto:N', N is how many times to re-estimate the batch "
                "size and must be a positive integer (e.g. auto:4)"
            )
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--batch_size {text!r}: give an integer, 'auto' or 'auto:N'"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError("--batch_size must be at least 1")
    return value


def bool_value(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def seed_values(text: str) -> list[int | None]:
    """lm-eval's `--seed`: one value for all four, or 3-4 comma-separated (`None` leaves one
    unseeded; a missing fourth takes its default)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1:
        parts = parts * 4
    if len(parts) not in (3, 4):
        raise argparse.ArgumentTypeError(
            f"--seed {text!r}: give one integer or 3-4 comma-separated values (e.g. 0,1234,1234,1234)"
        )
    out: list[int | None] = []
    for p in parts:
        if p.lower() == "none":
            out.append(None)
            continue
        try:
            out.append(int(p))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--seed value {p!r} is not an integer or None"
            ) from None
    if len(out) == 3:
        log.warning("--seed has 3 values; the few-shot seed takes its default %d", DEFAULT_SEED[3])
        out.append(DEFAULT_SEED[3])
    return out


# `jaxeval run`'s options that are not run arguments (`jaxeval.run_config.RunConfig`'s fields,
# which the options of the same names fill): the command's own, and those it turns into run
# arguments (`--seed`: `seed_fields`; `--include_path`, `--data_dir`: the task manager)
COMMAND_OPTIONS = frozenset(
    {"config", "output_path", "show_config", "include_path", "data_dir", "seed"}
    | {"trust_remote_code", "compilation_cache", "distributed", "trackio_args"}
    | {"wandb_args", "wandb_config_args", "hf_hub_log_args"}
)
SEED_FIELDS = ("random_seed", "numpy_random_seed", "torch_random_seed", "fewshot_random_seed")


def seed_fields(seed: list[int | None] | None) -> dict[str, int | None]:
    """`--seed`'s values as the run's four seed arguments (none given: all four unseeded).

    seed_fields([0, 1234, 1234, 5]) -> {"random_seed": 0, ..., "fewshot_random_seed": 5}
    """
    return dict(zip(SEED_FIELDS, seed or (None,) * len(SEED_FIELDS)))


def cache_request_fields(value: str | None) -> dict[str, bool]:
    """`--cache_requests true|refresh|delete` as the run's three request-cache arguments."""
    return {
        "cache_requests": value in ("true", "refresh", "delete"),
        "rewrite_requests_cache": value == "refresh",
        "delete_requests_cache": value == "delete",
    }


def parse_run_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The command line over a `--config` YAML over the defaults (module docstring)."""
    actions = [a for a in parser._actions if a.dest not in ("help", argparse.SUPPRESS)]
    args = parser.parse_args(argv, argparse.Namespace(**{a.dest: UNSET for a in actions}))
    config = _read_config(args.config, actions) if args.config not in (UNSET, None) else {}
    for action in actions:
        if getattr(args, action.dest) is UNSET:
            setattr(args, action.dest, config.get(action.dest, action.default))
    return args


def _read_config(path: str, actions: list[argparse.Action]) -> dict[str, Any]:
    """The `--config` YAML as option values; a bad file or key is a `JaxevalError` naming it."""
    import yaml  # start-up: only a run with --config reads YAML here

    hint = "write a YAML mapping of option names to values, e.g. `tasks: [arc_easy]`"
    try:
        with open(path, encoding="utf-8") as fh:
            values = yaml.safe_load(fh)
    except OSError as e:
        raise JaxevalError(f"cannot read --config ({e.strerror or e})", file=path) from None
    except UnicodeDecodeError as e:
        raise JaxevalError(f"--config is not UTF-8 text ({e.reason})", file=path) from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise JaxevalError(
            f"--config is not valid YAML{at}: {problem}", file=path, hint=hint
        ) from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise JaxevalError(
            f"--config holds a {type(values).__name__}, not a mapping of options",
            file=path,
            hint=hint,
        )
    by_dest = {a.dest: a for a in actions}
    out = {}
    for key, value in values.items():
        if key not in by_dest:
            near = difflib.get_close_matches(str(key), list(by_dest), n=1)
            known = (
                "the keys are `jaxeval run`'s option names without dashes (`jaxeval run --help`)"
            )
            raise JaxevalError(
                f"unknown key {key!r} in --config",
                file=path,
                field=str(key),
                hint=f"did you mean {near[0]!r}? {known}" if near else known,
            )
        if key != "config":
            out[key] = _config_value(by_dest[key], value, path)
    return out


def _config_value(action: argparse.Action, value: Any, path: str) -> Any:
    """A YAML value typed as the same option's command-line words would be."""
    key = action.dest
    if isinstance(action, ListArgs):
        words = value if isinstance(value, list) else [value]
        if not all(isinstance(w, str) for w in words):
            raise JaxevalError(f"{key} must be a name or a list of names", file=path, field=key)
        return [p.strip() for w in words for p in w.split(",") if p.strip()]
    if isinstance(action, WordArgs):
        if isinstance(value, dict):
            return value
        words = value if isinstance(value, list) else [value]
        if not all(isinstance(w, str) for w in words):
            raise JaxevalError(
                f"{key} must be a mapping, `k=v` text or a list of `k=v` words",
                file=path,
                field=key,
            )
        return words
    if isinstance(action, argparse._StoreTrueAction):
        if not isinstance(value, bool):
            raise JaxevalError(f"{key} must be true or false, got {value!r}", file=path, field=key)
        return value
    if value is None or isinstance(value, bool) and action.nargs == "?":
        return value if action.choices is None else (None if value is None else str(value).lower())
    if action.type is not None and not isinstance(value, str):
        value = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    if action.type is not None:
        try:
            value = action.type(value)
        except (argparse.ArgumentTypeError, ValueError) as e:
            raise JaxevalError(str(e), file=path, field=key) from None
    if action.choices is not None and value not in action.choices:
        raise JaxevalError(
            f"{key} {value!r} is not one of {', '.join(map(str, action.choices))}",
            file=path,
            field=key,
        )
    return value


def check_values(args: argparse.Namespace) -> None:
    """Values argparse lets through that lm-eval, JAX or numpy would refuse later: one named error."""
    limit = args.limit
    if limit is not None and (
        isinstance(limit, bool)
        or not isinstance(limit, (int, float))
        or not math.isfinite(limit)
        or limit <= 0
    ):
        raise JaxevalError(
            f"--limit {limit!r} is out of range",
            field="limit",
            hint="give a positive count of documents per task (e.g. 100) or a fraction below 1 "
            "(e.g. 0.1); leave it out for every document",
        )
    for slot, seed in zip(("python", "numpy", "torch", "few-shot"), args.seed or ()):
        if seed is not None and not 0 <= seed <= SEED_MAX:
            raise JaxevalError(
                f"--seed {seed} (the {slot} seed) is out of range",
                field="seed",
                hint=f"give seeds from 0 to {SEED_MAX} (2**32-1), or None to leave one unseeded",
            )
    if args.verbosity is not None and str(args.verbosity).upper() not in LEVELS:
        raise JaxevalError(
            f"--verbosity {args.verbosity!r} is not a logging level",
            field="verbosity",
            hint="use DEBUG, INFO, WARNING, ERROR or CRITICAL",
        )
    # start-up: the cache's rules and the folder check load JAX and the task engine
    from jaxeval.platform.compile_cache import OFF
    from jaxeval.preflight import check_writable_dir

    cache = args.compilation_cache
    if cache is not None and str(cache).strip().lower() not in OFF:
        check_writable_dir(
            Path(cache).expanduser(),
            field="compilation_cache",
            hint="give --compilation_cache a folder in a writable location, or `off`",
        )
