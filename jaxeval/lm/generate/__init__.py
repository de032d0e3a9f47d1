"""Generation on the host side: settings (`config`), lm-eval's gen_kwargs (`kwargs`), request
pairing and batch plans (`plan`), stop sequences (`stops`), static batches (`static`),
continuous batching (`engine`), and the `Generator` that runs them (`generator`)."""
