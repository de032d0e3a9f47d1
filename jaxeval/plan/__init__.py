"""`jaxeval plan`: what a run would need, before it runs. `memory` sizes parameters, KV cache and
activations per device for a mesh; `topology` names TPU slices and builds their abstract
devices; `compiled` compiles every executable of a run for such a slice on this host (libtpu) and
reads back the compiler's memory and cost figures."""
