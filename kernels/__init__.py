"""Pure jitted kernels: functions of `(params, batch, *, static config)` returning small pytrees.

    score (loglikelihood score points)      jaxeval.kernels.score
"""
