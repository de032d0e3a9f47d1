"""Run metadata for the results file: versions, git hash, devices, tokenizer facts."""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from typing import Any


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "N/A"


def git_hash(path: str | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "describe", "--always"],
            cwd=path,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


@functools.lru_cache(maxsize=1)
def _static_info() -> dict[str, Any]:
    import jax

    devices = jax.devices()
    return {
        "pretty_env_info": f"jax {jax.__version__}; {len(devices)} x {devices[0].device_kind} "
        f"({devices[0].platform}); processes {jax.process_count()}",
        "transformers_version": _version("transformers"),
        "jax_version": jax.__version__,
        "jaxeval_version": _version("jaxeval"),
        "lm_eval_version": None,
        "upper_git_hash": git_hash(".."),
    }


def environment_info() -> dict[str, Any]:
    return {"git_hash": git_hash(), **_static_info()}


def tokenizer_info(lm: Any) -> dict[str, Any]:
    tok = getattr(lm, "tokenizer", None)
    if tok is None:
        return {}
    return {
        "tokenizer_pad_token": [tok.pad_token, str(tok.pad_token_id)],
        "tokenizer_eos_token": [tok.eos_token, str(tok.eos_token_id)],
        "tokenizer_bos_token": [tok.bos_token, str(tok.bos_token_id)],
        "eot_token_id": getattr(lm, "eot_token_id", None),
        "max_length": getattr(lm, "max_length", None),
    }
