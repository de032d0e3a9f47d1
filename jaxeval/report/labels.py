"""Short, unique run labels: the model's shortest distinct name, then only what differs.

    runs (model_args, n-shot)                                   labels
    pretrained=/ckpt/exp1/checkpoint-100          0-shot   ->   exp1/checkpoint-100
    pretrained=/ckpt/exp2/checkpoint-100          0-shot   ->   exp2/checkpoint-100
    pretrained=/ckpt/exp2/checkpoint-200          0-shot   ->   checkpoint-200
    pretrained=HuggingFaceTB/SmolLM2-135M         0-shot   ->   HuggingFaceTB/SmolLM2-135M · 0-shot
    pretrained=HuggingFaceTB/SmolLM2-135M         5-shot   ->   HuggingFaceTB/SmolLM2-135M · 5-shot
    pretrained=/models/q,gguf_file=smol-q8_0.gguf          ->   smol-q8_0.gguf

A local path is named by its last parts, as few as tell it from the other runs' paths (the first
two runs above share "checkpoint-100", so both get one part more); a GGUF by its file, not
its folder; an in-memory model by its name. A training step not in the name is added ("@ step
N"). Runs that still share a name get the settings that differ between them, in this order:
n-shot, limit, model arguments (dtype=..., each key on its own), chat template, few-shot as
multi-turn, system instruction, gen_kwargs. The engine, then the date, settle any tie left.
"""

from __future__ import annotations

import hashlib
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.lm.args import parse_model_args

_NAME_KEYS = ("pretrained", "gguf_file")  # name the model: never a setting
_MAX_SETTING = 32  # characters of one setting in a label


def model_args_of(results: dict[str, Any]) -> dict[str, Any]:
    """The run's `--model_args` as a dict ({} when absent or not k=v pairs)."""
    raw = results.get("config", {}).get("model_args")
    try:
        return parse_model_args(raw)
    except (JaxevalError, TypeError, ValueError):
        return {}


def is_local_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~"))


def model_path_of(results: dict[str, Any]) -> str:
    """What names the model: an in-memory model's name, `pretrained` (with `gguf_file` appended
    as a last path part), else the results file's model_name."""
    in_memory = results.get("config", {}).get("in_memory") or {}
    if in_memory.get("name"):
        return str(in_memory["name"])
    args = model_args_of(results)
    model = str(args.get("pretrained") or results.get("model_name") or "")
    model = model or str(results.get("config", {}).get("model") or "model")
    gguf = args.get("gguf_file")
    if gguf:
        return f"{model.rstrip('/')}/{str(gguf).rsplit('/', 1)[-1]}"
    return model


def short_names(paths: list[str]) -> dict[str, str]:
    """Each path's fewest last parts that no other path ends with; hub names stay whole.

    ["/a/x/final", "/b/y/final", "/b/y/step-9", "org/model"]
    -> {"/a/x/final": "x/final", "/b/y/final": "y/final", "/b/y/step-9": "step-9",
        "org/model": "org/model"}
    """
    distinct = list(dict.fromkeys(paths))
    parts = {p: [s for s in p.split("/") if s] or [p] for p in distinct}
    out = {}
    for path in distinct:
        if not is_local_path(path) and not path.endswith(".gguf"):
            out[path] = path
            continue
        mine = parts[path]
        others = [parts[q] for q in distinct if q != path]
        k = 1
        while k < len(mine) and any(q[-k:] == mine[-k:] for q in others):
            k += 1
        out[path] = "/".join(mine[-k:])
    return out


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_SETTING else text[: _MAX_SETTING - 1] + "…"


def _setting(key: str, value: Any) -> str:
    """key=value, a local path as its last part: tokenizer=/a/b/tok -> tokenizer=…/tok."""
    text = str(value)
    if is_local_path(text) and "/" in text.rstrip("/"):
        text = "…/" + text.rstrip("/").rsplit("/", 1)[-1]
    return _shorten(f"{key}={text}")


def _sha7(text: Any) -> str:
    return hashlib.sha256(str(text).encode("utf-8")).hexdigest()[:7]


def n_shot_text(results: dict[str, Any], tasks: list[str] | None = None) -> str:
    """ "5-shot" when every task (of `tasks`, if given) has the same n-shot, else the most common
    n-shot and the other tasks': "5-shot (wikitext 0-shot)"."""
    shots = {t: n for t, n in (results.get("n-shot") or {}).items() if n is not None}
    if tasks:
        shots = {t: n for t, n in shots.items() if t in tasks}
    if not shots:
        return ""
    counts: dict[str, int] = {}
    for n in shots.values():
        counts[str(n)] = counts.get(str(n), 0) + 1
    common = max(counts, key=counts.__getitem__)  # the first of ties
    others = ", ".join(f"{t} {n}-shot" for t, n in sorted(shots.items()) if str(n) != common)
    return f"{common}-shot" + (f" ({others})" if others else "")


def settings_of(results: dict[str, Any], tasks: list[str] | None = None) -> dict[str, str]:
    """(setting -> short text) of one run, in the label order of the module docstring; "" when a
    setting is off, so it is left out of a label. `tasks`: the tasks whose n-shot is told."""
    config = results.get("config", {})
    limit = config.get("limit")
    out = {
        "n-shot": n_shot_text(results, tasks),
        "limit": "all documents" if limit is None else f"limit {limit}",
    }
    for key, value in model_args_of(results).items():
        if key not in _NAME_KEYS:
            out[f"model_args.{key}"] = _setting(key, value)
    if config.get("dtype") and "model_args.dtype" not in out:
        out["dtype"] = f"dtype={config['dtype']}"
    template = results.get("chat_template_sha") or (
        _sha7(results["chat_template"]) if results.get("chat_template") else None
    )
    out["chat template"] = f"chat template {str(template)[:7]}" if template else "no chat template"
    multiturn = template and results.get("fewshot_as_multiturn")  # no effect without a template
    out["multiturn"] = "few-shot as multi-turn" if multiturn else ""
    system = results.get("system_instruction")
    out["system"] = f"system prompt {_sha7(system)}" if system else ""
    gen_kwargs = config.get("gen_kwargs")
    if gen_kwargs:
        gen = (
            gen_kwargs
            if isinstance(gen_kwargs, str)
            else ",".join(f"{k}={v}" for k, v in dict(gen_kwargs).items())
        )
        out["gen_kwargs"] = _shorten(gen)
    return out


def _without_sha(text: str) -> str:
    return "chat template" if text.startswith("chat template ") else text


def differing_settings(settings: list[dict[str, str]]) -> list[str]:
    """The settings that differ between the runs: "" is off (a missing model argument too)."""
    keys = list(dict.fromkeys(k for s in settings for k in s))
    return [k for k in keys if len({s.get(k, "") for s in settings}) > 1]


def _shot_tasks(group: list[dict[str, Any]]) -> list[str]:
    """The tasks whose n-shot differs between the runs of `group`."""
    shots = [r.get("n-shot") or {} for r in group]
    tasks = list(dict.fromkeys(t for s in shots for t in s))
    return [t for t in tasks if len({str(s.get(t)) for s in shots}) > 1]


def _with_settings(names: list[str], results: list[dict[str, Any]]) -> list[str]:
    """Names shared by runs get the settings that differ between those runs (the n-shot of the
    tasks where it differs)."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        groups.setdefault(name, []).append(i)
    out = list(names)
    for name, members in groups.items():
        if len(members) < 2:
            continue
        tasks = _shot_tasks([results[i] for i in members])
        settings = {i: settings_of(results[i], tasks) for i in members}
        group = list(settings.values())
        keys = differing_settings(group)
        templates = {s.get("chat template", "") for s in group} - {"no chat template"}
        for i in members:
            texts = [settings[i].get(k, "") for k in keys]
            if len(templates) < 2:  # one template among the runs: no need to say which
                texts = [_without_sha(t) for t in texts]
            texts = [t for t in texts if t]
            if texts:
                out[i] = f"{name} · {' · '.join(texts)}"
    return out


def base_names(results: list[dict[str, Any]], steps: list[int | None]) -> list[str]:
    """The model's short name (module docstring), with its step when the name lacks it."""
    paths = [model_path_of(r) for r in results]
    short = short_names(paths)
    names = []
    for path, step in zip(paths, steps):
        name = short[path]
        if step is not None and str(step) not in name:
            name = f"{name} @ step {step}"
        names.append(name)
    return names


def run_labels(
    results: list[dict[str, Any]],
    steps: list[int | None],
    engines: list[str],
    dates: list[str],
) -> list[str]:
    """One unique label per run (module docstring)."""
    labels = _with_settings(base_names(results, steps), results)
    for extra in (engines, dates):
        groups: dict[str, list[int]] = {}
        for i, label in enumerate(labels):
            groups.setdefault(label, []).append(i)
        for label, members in groups.items():
            values = [extra[i] for i in members]
            if len(members) > 1 and (len(set(values)) == len(values) or extra is dates):
                for i in members:
                    labels[i] = f"{label} ({extra[i]})"
    return labels
