"""The `jaxeval` command keeps transformers from importing torch (jaxeval.cli.startup), without changing
what the tokenizer or the config say; JAXEVAL_TRANSFORMERS_TORCH=1 and an in-process caller that
already imported transformers keep torch visible."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.tiny_models import tiny_checkpoint

pytest.importorskip("torch")  # the test extra installs it; without it there is nothing to hide

# Loads a checkpoint's config and tokenizer as JaxLM does, tokenizes, renders a chat template.
PROBE = """
import json, sys
from jaxeval.cli.startup import hide_torch_from_transformers
hidden = hide_torch_from_transformers()
from transformers import AutoConfig, AutoTokenizer
path = sys.argv[1]
config = AutoConfig.from_pretrained(path)
tok = AutoTokenizer.from_pretrained(path)
print(json.dumps({
    "hidden": hidden,
    "torch_imported": "torch" in sys.modules,
    "ids": tok(["Question: what is 2 + 2?\\nAnswer: 4", " fox"])["input_ids"],
    "config": config.to_dict(),
}))
"""


def _probe(path: str, **env: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, path],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_command_loads_config_and_tokenizer_without_torch():
    path = tiny_checkpoint("llama")
    quick = _probe(path, JAXEVAL_TRANSFORMERS_TORCH="0")
    usual = _probe(path, JAXEVAL_TRANSFORMERS_TORCH="1")
    assert quick["hidden"] and not quick["torch_imported"]
    assert not usual["hidden"] and usual["torch_imported"]
    assert quick["ids"] == usual["ids"]
    assert quick["config"] == usual["config"]


def test_nothing_changes_once_transformers_is_imported():
    import transformers  # noqa: F401  (this test process: lm-eval and torch share it)
    from transformers.utils import import_utils

    from jaxeval.cli.startup import hide_torch_from_transformers

    assert hide_torch_from_transformers() is False
    assert import_utils.is_torch_available()


def test_entry_point_is_the_console_script():
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "jaxeval"]
    assert script.value == "jaxeval.cli:entry"
