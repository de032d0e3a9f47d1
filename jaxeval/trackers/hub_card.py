"""The dataset card of a results repository on the Hugging Face Hub: one config per model and task.

    files in the repository                               configs on the card
    org__m/results_2024-05-01T10-00-00.5.json        ->   org__m__results: 2024_05_01T10_00_00.5, latest
    org__m/samples_arc_easy_2024-05-01T10-00-00.5.jsonl   org__m__arc_easy: 2024_05_01T10_00_00.5, latest
    org__m/samples_arc_easy_2024-04-01T09-00-00.1.jsonl   (older: not listed)

Each config has two splits that name the newest file: its date (non-word characters made "_")
and `latest`, as lm-eval's `recreate_metadata_card` writes them. lm-eval takes the results
files' date with its ".json" still on, so it never lists them; here they are listed.
"""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any

from jaxeval.results.files import date_id_of, sanitize_model_name


def _config_of(path: PurePosixPath) -> str | None:
    """`<model>__results` or `<model>__<task>` for a results or samples file, else None."""
    name, model = path.name, sanitize_model_name(str(path.parent))
    if name.startswith("results_") and name.endswith(".json"):
        return f"{model}__results"
    if name.startswith("samples_") and name.endswith(".jsonl"):
        task = name[len("samples_") : name.rfind("_")]
        return f"{model}__{re.sub(r'[^A-Za-z0-9_]', '_', task)}"
    return None


def card_configs(repo_files: list[str]) -> list[dict[str, Any]]:
    """The card's `configs`: per model and task, the newest file as split <date> and `latest`."""
    newest: dict[str, tuple[str, str]] = {}
    for file in repo_files:
        path = PurePosixPath(file)
        config = _config_of(path)
        if config is None:
            continue
        date = date_id_of(path.name)
        if config not in newest or date > newest[config][0]:
            newest[config] = (date, path.name)
    configs = []
    for config, (date, name) in sorted(newest.items()):
        pattern = [f"**/{name}"]
        split = re.sub(r"[^\w.]", "_", date)
        configs.append(
            {
                "config_name": config,
                "data_files": [
                    {"split": split, "path": pattern},
                    {"split": "latest", "path": list(pattern)},
                ],
            }
        )
    return configs


def card_summary(repo_id: str, results: dict[str, Any], model_name: str, model_source: str) -> str:
    """The card's text: where the data came from, how to load it, the latest results."""
    shown = model_name
    if model_source in ("hf", "jax") and re.fullmatch(r"[\w.-]+/[\w.-]+", model_name):
        shown = f"[{model_name}](https://huggingface.co/{model_name})"
    latest = {"all": results.get("results", {}), **results.get("results", {})}
    lines = [
        f"Dataset automatically created during the evaluation run of model {shown} (jaxeval, "
        "lm-evaluation-harness format).",
        "",
        "Each configuration is one evaluated task of one model (plus `<model>__results`, the "
        "aggregated results); each run is a split named by its date, and the `latest` split "
        "points to the newest run.",
        "",
        "```python",
        "from datasets import load_dataset",
        f'data = load_dataset("{repo_id}", name="<model>__<task>", split="latest")',
        "```",
        "",
        "## Latest results",
        "",
        "```python",
        json.dumps(latest, indent=4, default=str),
        "```",
    ]
    return "\n".join(lines)


def dataset_card(
    repo_id: str,
    repo_files: list[str],
    results: dict[str, Any],
    *,
    model_name: str,
    model_source: str,
    leaderboard_url: str = "",
    point_of_contact: str = "",
) -> Any:
    """A `huggingface_hub.DatasetCard` for the repository (pushed by `push_to_hub`)."""
    from huggingface_hub import DatasetCard, DatasetCardData  # optional at start-up

    data = DatasetCardData(
        pretty_name=f"Evaluation run of {model_name}",
        dataset_summary=card_summary(repo_id, results, model_name, model_source),
        repo_url=f"https://huggingface.co/{model_name}",
        leaderboard_url=leaderboard_url,
        point_of_contact=point_of_contact,
        configs=card_configs(repo_files),
    )
    return DatasetCard.from_template(data, pretty_name=data.pretty_name)
