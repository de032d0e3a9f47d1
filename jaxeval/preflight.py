"""Checks that run before the model loads, so a bad run fails in seconds instead of after hours.

    jaxeval run ... --output_path out/           check_output_path: the exact folder it will write
                                                  (out/<model>/) is writable or creatable (probed
                                                  with a temporary file; nothing is created)
    --gen_kwargs temperature=hot                  check_generation_kwargs: each generation task's
                                                  merged kwargs pass lm-eval's rules (typed values)
    --limit, few-shot pools, templates            check_tasks: the limit fits, the pool holds
                                                  num_fewshot examples, the first document renders
    --use_cache PREFIX                            jaxeval.cache.ResponseStore opens the file first
    unknown task + broken YAML in --include_path  explain_unknown_task names the unreadable files

Each failure is a `JaxevalError` (one paragraph, exit code 2), and no results file exists yet.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from jaxeval.api.task_manager import builtin_task_dir
from jaxeval.api.yaml_loader import load_yaml
from jaxeval.errors import JaxevalError
from jaxeval.lm.generate.kwargs import normalize
from jaxeval.results.files import model_name, sanitize_model_name


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable_dir(folder: Path, *, field: str, hint: str) -> None:
    """`folder` exists and takes a new file, or can be created under its nearest existing parent.

    out/run/model  (out/ exists, run/ does not)  -> a temporary file is created and removed in out/
    out/file.txt/x (out/file.txt is a file)      -> error: a file is in the way
    """
    base = _nearest_existing(folder)
    if not base.is_dir():
        raise JaxevalError(
            f"{base} is a file, so the folder {folder} cannot be created",
            file=str(base),
            field=field,
            hint=hint,
        )
    try:
        fd, probe = tempfile.mkstemp(dir=base, prefix=".jaxeval-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise JaxevalError(
            f"cannot write in {base} ({e.strerror or e})", file=str(base), field=field, hint=hint
        ) from None
    if not os.access(base, os.W_OK | os.X_OK):
        raise JaxevalError(
            f"cannot write in {base} (no write permission)", file=str(base), field=field, hint=hint
        )


def check_output_path(output_path: str | None, model_args: Any = None) -> None:
    """The folder `jaxeval.results.files.save_results` will write: `P/<model>/` (the model's name
    from `model_args`, as the save names it) or, for `P.json`, P's folder. It must exist and take
    a file, or be creatable (nothing is created here).

    out/ with out/__models__tiny a file -> error: a file is where the results folder goes
    """
    if not output_path:
        return
    path = Path(output_path)
    hint = "give --output_path a folder (or a .json file name) in a writable location"
    if path.suffix == ".json":
        if path.is_dir():
            raise JaxevalError(
                f"{path} is a folder, not a .json file name",
                file=str(path),
                field="output_path",
                hint=hint,
            )
        check_writable_dir(path.parent, field="output_path", hint=hint)
        return
    if path.exists() and not path.is_dir():
        raise JaxevalError(
            "the output path is an existing file, not a folder",
            file=str(path),
            field="output_path",
            hint="name a folder (results go to <folder>/<model>/results_<date>.json)"
            " or a new .json file name",
        )
    folder = path / sanitize_model_name(model_name(model_args)) if model_args else path
    if folder != path and folder.exists() and not folder.is_dir():
        raise JaxevalError(
            f"a file is where the results folder {folder} goes (<output_path>/<model name>)",
            file=str(folder),
            field="output_path",
            hint="move that file away, or give --output_path another folder",
        )
    check_writable_dir(folder, field="output_path", hint=hint)


def check_generation_kwargs(tasks: dict[str, Any]) -> None:
    """Every generate_until task's kwargs (YAML merged with --gen_kwargs) pass `normalize`."""
    for name, task in tasks.items():
        cfg = task.config
        if cfg.output_type != "generate_until":
            continue
        try:
            normalize(cfg.generation_kwargs, eos=None)
        except JaxevalError as e:
            src = (cfg.metadata or {}).get("config_source")
            raise JaxevalError(
                e.message,
                task=name,
                file=src,
                field=f"generation_kwargs.{e.field or '?'}",
                hint=e.hint or "fix the task's generation_kwargs or the --gen_kwargs value",
            ) from None


def sample_size(num_docs: int, limit: int | float | None, task: str) -> int | None:
    """lm-eval's `get_sample_size`, with out-of-range limits rejected instead of ignored."""
    if limit is None:
        return None
    if (
        isinstance(limit, bool)
        or not isinstance(limit, (int, float))
        or limit <= 0
        or math.isnan(limit)
    ):
        raise JaxevalError(
            f"--limit {limit!r} is out of range",
            task=task,
            field="limit",
            hint="give a positive integer (documents) or a fraction in (0, 1)",
        )
    if limit < 1.0:
        return int(math.ceil(num_docs * limit))
    if float(limit) != int(limit):
        raise JaxevalError(
            f"--limit {limit!r} is neither a whole number nor a fraction below 1",
            task=task,
            field="limit",
        )
    return int(limit)


def check_tasks(
    tasks: dict[str, Any], *, limit: Any, samples: dict | None, fewshot_seed: int | None
) -> None:
    """Limits, sample indices, few-shot pools and the first document's prompt, per task.

    The first document's context is rendered with the task's own sampler, which is then re-seeded
    with `fewshot_seed`, so the run draws exactly the examples it would have drawn without this.
    """
    for name, task in tasks.items():
        docs = getattr(task, "eval_docs", None)
        if docs is None:
            continue
        sample_size(len(docs), limit, name)
        for i in (samples or {}).get(name, []):
            if not isinstance(i, int) or not 0 <= i < len(docs):
                raise JaxevalError(
                    f"--samples index {i!r} is outside the {len(docs)} documents",
                    task=name,
                    field="samples",
                )
        n = task.config.num_fewshot or 0
        sampler = getattr(task, "sampler", None)
        if n > 0 and sampler is not None and n > len(sampler.pool):
            raise JaxevalError(
                f"asked for {n} few-shot examples but the pool has only {len(sampler.pool)}",
                task=name,
                field="num_fewshot",
                hint="lower --num_fewshot or enlarge the pool",
            )
        if docs:
            task.fewshot_context(docs[0], n, doc_index=0)
            task.set_fewshot_seed(fewshot_seed)


def explain_unknown_task(error: JaxevalError, task_manager: Any) -> JaxevalError:
    """An unknown-task error, plus the YAML files under --include_path that could not be read
    (the index skips them, so their task names were never seen)."""
    skip = {builtin_task_dir(), getattr(task_manager, "catalogue_dir", None)}
    broken = []
    for root in getattr(task_manager, "paths", []):
        if root in skip:
            continue
        for path in sorted(Path(root).rglob("*.yaml")):
            try:
                load_yaml(path, resolve_functions=False)
            except JaxevalError as e:
                broken.append(f"{path}: {str(e).splitlines()[0]}")
    if not broken:
        return error
    return JaxevalError(
        f"{error.message}; {len(broken)} YAML file(s) under --include_path could not be read, so "
        f"their tasks are missing: " + "; ".join(broken[:5]),
        field=error.field,
        hint="fix those files (the first error of each is shown above)",
    )


CHAT_LOG = logging.getLogger("jaxeval.chat_template")
CHAT_MARKERS = ("inst", "chat")  # lm-eval's test for an instruct or chat checkpoint


def warn_chat_model_without_template(model_args: Any, apply_chat_template: bool | str) -> bool:
    """lm-eval's one-line warning when a model argument names an instruct or chat checkpoint
    (any value containing "inst" or "chat", case-insensitive, as lm-eval tests) and no chat
    template is applied; True if it warned."""
    if apply_chat_template:
        return False
    if isinstance(model_args, str):
        values = [model_args]
    elif isinstance(model_args, dict):
        values = [str(v) for v in model_args.values()]
    else:
        return False
    if not any(m in v.lower() for v in values for m in CHAT_MARKERS):
        return False
    name = model_args.get("pretrained") if isinstance(model_args, dict) else model_args
    CHAT_LOG.warning(
        "%s looks like an instruct or chat model, but no chat template is applied: add "
        "--apply_chat_template (and --fewshot_as_multiturn for few-shot) to prompt it as a chat",
        name,
    )
    return True


def check_chat_template(lm: Any, apply_chat_template: bool | str) -> None:
    """`--apply_chat_template` on a model whose tokenizer has no chat template is a `JaxevalError`
    before any prompt is built (lm-eval's HF backend fails in transformers on the first prompt).
    Models without a Hugging Face tokenizer (`lm.tokenizer`) apply their own template."""
    if not apply_chat_template:
        return
    tokenizer = getattr(lm, "tokenizer", None)
    if tokenizer is None or not hasattr(tokenizer, "chat_template"):
        return
    if tokenizer.chat_template or getattr(tokenizer, "default_chat_template", None):
        return
    raise JaxevalError(
        f"the model's tokenizer ({getattr(tokenizer, 'name_or_path', '') or 'given'}) has no "
        "chat template",
        field="apply_chat_template",
        hint="run without --apply_chat_template, or pass tokenizer=<a tokenizer dir with a chat "
        "template> in --model_args",
    )
