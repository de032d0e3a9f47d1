"""`jaxeval demo` and what it stands on: the demo run itself (`run`), the real checkpoint it
fetches once (`fetch`: SmolLM2-135M-Instruct, `python -m jaxeval.demo.fetch`), and tiny local
tokenizers and checkpoints built offline (`tiny`, which the tests and benchmarks use too)."""
