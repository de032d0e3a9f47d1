"""Pure jitted kernels: functions of `(params, batch, *, static config)` returning small pytrees.

score     loglikelihood at packed score points -> (loglik[S], is_greedy[S])   jaxeval.kernels.score
generate  prefill + while-loop decode with on-device stops and sampling        jaxeval.kernels.generate

This folder installs as `jaxeval.kernels` (setup.py). Run from the repository's root (pytest, or
`python -c` there), the root is on `sys.path` and this file would also answer `import kernels`,
the name of Hugging Face's `kernels` package, which transformers (5.25 and later) imports whenever
it is installed. Imported under that name, this module hands the name over to the installed
package (or raises ImportError when there is none), so it never shadows it.
"""

if __name__ == "kernels":  # `import kernels` through the repository root: not this package
    import importlib.machinery
    import importlib.util
    import os
    import sys

    _root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    _path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _root]
    _spec = importlib.machinery.PathFinder.find_spec("kernels", _path)
    if _spec is None or _spec.loader is None:
        del sys.modules["kernels"]
        raise ImportError("No module named 'kernels' (Hugging Face's package is not installed)")
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["kernels"] = _module  # the import statement returns sys.modules["kernels"]
    _spec.loader.exec_module(_module)
else:
    from jaxeval.kernels.generate import GenerateBatch, GenerateResult, StopTable, generate
    from jaxeval.kernels.score import ScoreBatch, ScoreResult, score

__all__ = [
    "GenerateBatch",
    "GenerateResult",
    "ScoreBatch",
    "ScoreResult",
    "StopTable",
    "generate",
    "score",
]
