"""Device kernels: one operation on one platform, as pure functions of arrays.

    attention   the masking rule every attention path shares (`Mask`), the Pallas TPU kernels,
                the cuDNN call and the C++ custom call for XLA:CPU   jaxeval.ops.attention

They know no model: the model side (`jaxeval.models.attention`'s backends) decides when each one
applies and calls it, so this package imports only the foundations (`shapes`, `paths`, `errors`).
The jitted programs over batches (scoring, generation) are `jaxeval.kernels`.
"""

__all__: list[str] = []
