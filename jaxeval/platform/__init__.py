"""Foundations for running on devices: meshes and the batch sharding rule (`mesh`), several JAX
processes as one evaluator (`distributed`), and JAX's persistent compilation cache
(`compile_cache`). Every layer may import these; they import no other part of jaxeval."""
