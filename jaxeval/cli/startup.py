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

import importlib.abc
import importlib.machinery
import os
import sys
import types

KEEP_TORCH = "JAXEVAL_TRANSFORMERS_TORCH"


def hide_torch_from_transformers() -> bool:
    """Makes transformers' `is_torch_available()` false for this process; True if it will.

    Nothing is imported here: `jaxeval --help` or `ls` never loads transformers. The change is made
    by an import hook the moment transformers' `utils.import_utils` module has run, before any other
    transformers module asks it about torch."""
    if os.environ.get(KEEP_TORCH, "0") not in ("0", "", "false", "False"):
        return False
    if "transformers" in sys.modules or "torch" in sys.modules:
        return False
    if not any(isinstance(finder, _HideTorchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _HideTorchOnImport())
    return True


def _hide_torch(import_utils: types.ModuleType) -> None:
    found = import_utils._is_package_available

    def available(pkg_name: str, return_version: bool = False):
        if pkg_name == "torch":
            return (False, "N/A") if return_version else False
        return found(pkg_name, return_version)

    import_utils._is_package_available = available
    import_utils.is_torch_available.cache_clear()


class _HideTorchOnImport(importlib.abc.MetaPathFinder):
    """Finds transformers' `utils.import_utils` as the path finder would and patches it once run."""

    TARGET = "transformers.utils.import_utils"

    def find_spec(self, fullname, path, target=None):
        if fullname != self.TARGET:
            return None
        sys.meta_path.remove(self)  # once; the module is imported once per process
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            _hide_torch(module)

        spec.loader.exec_module = exec_module
        return spec


def quiet_transformers_advice() -> None:
    """No transformers advice lines from the command: without torch (or with torch hidden, above)
    transformers prints "PyTorch was not found. Models won't be available" at import, advice for
    its own models, which jaxeval never runs. Its advisory switch stays the user's to set."""
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
