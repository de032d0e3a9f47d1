"""Start-up of the `jaxeval` command: keep transformers from importing torch it will not use.

transformers imports torch whenever torch is installed, to build a config or a tokenizer it never
runs through torch: `AutoTokenizer` pulls in `torch` and `torch.distributed`, which takes longer
than the config and tokenizer themselves (docs/performance.md, "Start-up and compilation"). jaxeval
needs neither, and lm-eval users usually have torch installed, so the command
line (a process of its own) tells transformers torch is absent before anything imports it:

    jaxeval run ...                                  transformers sees no torch (a faster start)
    JAXEVAL_TRANSFORMERS_TORCH=1 jaxeval run ...     transformers sees torch (a task helper that runs
                                                     a transformers model on torch needs this)

Only transformers' view changes: `import torch` still works for anything that imports it itself.
A library user (`jaxeval.simple_evaluate` in a notebook, a test process that also runs lm-eval)
is never affected: `hide_torch_from_transformers` is called by the command's entry point only, and
does nothing once transformers or torch is imported.
"""

from __future__ import annotations

import os
import sys

KEEP_TORCH = "JAXEVAL_TRANSFORMERS_TORCH"


def hide_torch_from_transformers() -> bool:
    """Makes transformers' `is_torch_available()` false for this process; True if it did."""
    if os.environ.get(KEEP_TORCH, "0") not in ("0", "", "false", "False"):
        return False
    if "transformers" in sys.modules or "torch" in sys.modules:
        return False
    from transformers.utils import import_utils  # no torch: this module only inspects packages

    found = import_utils._is_package_available

    def available(pkg_name: str, return_version: bool = False):
        if pkg_name == "torch":
            return (False, "N/A") if return_version else False
        return found(pkg_name, return_version)

    import_utils._is_package_available = available
    import_utils.is_torch_available.cache_clear()
    return True


def quiet_transformers_advice() -> None:
    """No transformers advice lines from the command: without torch (or with torch hidden, above)
    transformers prints "PyTorch was not found. Models won't be available" at import, advice for
    its own models, which jaxeval never runs. Its advisory switch stays the user's to set."""
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
