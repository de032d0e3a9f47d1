"""Pure jitted kernels: functions of `(params, batch, *, model, runtime, static config)` returning
small pytrees.

score     loglikelihood at packed score points -> (loglik[S], is_greedy[S])   jaxeval.kernels.score
generate  prefill + while-loop decode with on-device stops and sampling        jaxeval.kernels.generate
continuous  continuous batching: admit prompts into rows, decode chunks       jaxeval.kernels.continuous

`model` is what the model is (`jaxeval.models.contract.DecoderModel`), `runtime` how it runs on its
devices (`jaxeval.models.runtime.Runtime`); both are static arguments, in every executable's key.
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
