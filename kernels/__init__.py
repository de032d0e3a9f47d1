"""Pure jitted kernels: functions of `(params, batch, *, static config)` returning small pytrees.

score     loglikelihood at packed score points -> (loglik[S], is_greedy[S])   jaxeval.kernels.score
generate  prefill + while-loop decode with on-device stops and sampling        jaxeval.kernels.generate
"""

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
