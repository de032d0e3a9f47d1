"""`generate_until` with lm-eval 0.4.13's HF semantics on the compiled generation kernels.

    gen = Generator(model=loaded, tokenizer=tok, max_length=2048, config=GenConfig(batch_size=16))
    texts = gen.generate_until([(context, gen_kwargs), ...])

Per request `(context, gen_kwargs)`, exactly as `HFLM.generate_until`:

1. `gen_kwargs` normalized (`gen_kwargs.normalize`): stop strings with the EOS string appended,
   `max_gen_toks`, greedy or sampling settings.
2. The context encoded with lm-eval's BOS rules (`encoding.Encoder.tok_encode`) and left-truncated
   to `max_length - max_gen_toks` tokens.
3. Generation stops at the model's `generation_config` EOS id(s), at a stop string (found on device
   in the decoded bytes, see `jaxeval/kernels/stop_match.py`) or after `max_gen_toks` tokens.
4. The generated tokens are decoded with `skip_special_tokens=True` and cut at the earliest stop
   string on the host; nothing else is stripped.

Requests are batched across different gen_kwargs (every setting is per row, so a row's output does
not depend on its batch); lm-eval groups by gen_kwargs only because HF `generate` takes one setting
per call. Sampling keys come from (seed, distinct request index, repeat index).

Should the device stop a row on a stop string that the full decode does not contain (possible only
with decoders that rewrite text, e.g. `clean_up_tokenization_spaces` or a stripped leading space),
the host notices and regenerates that row without device stop strings, so a row is never cut early.

Where the work goes: the continuous engine (`gen_engine`, the default) or the static batches
(`gen_static`); settings in `gen_config.GenConfig`; every executable through the Generator's one
`Executables` (`jaxeval.lm.executables`). A model adapter owns one Generator (`JaxLM.generator`).

On a mesh spanning several processes every process plans the same batches (checked by digest),
places its own shards of them (`mesh.put_global`) and reads the replicated results (`mesh.to_host`),
so every process decodes the same texts and takes the same retry decisions.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from jax.sharding import Mesh
from tqdm.auto import tqdm

from jaxeval.errors import JaxevalError
from jaxeval.kernels.generate import STOP_STRING, StopTable
from jaxeval.lm.encoding import Encoder
from jaxeval.lm.executables import Executables
from jaxeval.lm.generate.config import (
    BARE_BATCH_SIZE,
    GenConfig,
    load_generation_config,
)
from jaxeval.lm.generate.engine import EngineTarget, run_continuous
from jaxeval.lm.generate.plan import Prompt, request_pairs
from jaxeval.lm.generate.prompts import build_prompts, prompt_rules
from jaxeval.lm.generate.static import run_static
from jaxeval.lm.generate.stops import (
    BUFFER_BYTES,
    contains_stop,
    cut_at_stops,
    stop_rows,
    token_bytes,
)
from jaxeval.models.contract import capabilities_of
from jaxeval.models.runtime import Runtime
from jaxeval.platform import phases
from jaxeval.platform.mesh import batch_shards, place_params, put_global, replicated

Rows = list[tuple[int, list[int], int]]  # (request position, token ids, end reason)
_REASONS = ("ended_budget", "ended_stop_token", "ended_stop_string")


class Generator:
    """Compiled generation for one model, tokenizer and mesh; reusable across calls.

    gen = Generator(model=loaded, tokenizer=tok, max_length=512, config=GenConfig(batch_size=8))
    gen = Generator(model=loaded, tokenizer=tok, max_length=512, batch_size=8)   # the same
    gen.generate_until([("Q: 2+2?\\nA:", {"until": ["\\n"], "max_gen_toks": 16})])  -> [" 4"]
    gen.compile_count  -> distinct executables compiled so far

    `model` is a `LoadedModel` (spec, params, hf_config, path, mesh); `config` a `GenConfig`, or
    its fields as keywords; `encoder` the adapter's (lm-eval's BOS rules), else one is built.
    """

    def __init__(
        self,
        *,
        model: Any,
        tokenizer: Any,
        max_length: int,
        config: GenConfig | None = None,
        encoder: Encoder | None = None,
        add_bos_token: bool | None = None,
        eot_token_id: int | None = None,
        **settings: Any,
    ):
        if config is not None and settings:
            raise JaxevalError(
                "give either config= or GenConfig's fields, not both", field="config"
            )
        unknown = sorted(set(settings) - set(GenConfig.names()))
        if unknown:
            raise TypeError(
                f"Generator got unknown settings {unknown}; GenConfig has {GenConfig.names()}"
            )
        config = config if config is not None else GenConfig(**settings)
        if config.batch_size is None:
            config = dataclasses.replace(config, batch_size=BARE_BATCH_SIZE)
        self.config = config
        self.spec = model.spec
        self.mesh: Mesh = model.mesh
        # how it runs (`jaxeval.models.runtime`); a bare model object: the reference on its mesh
        self.runtime: Runtime = getattr(model, "runtime", None) or Runtime(mesh=self.mesh)
        self.params = place_params(model.params, self.mesh)
        self.tokenizer = tokenizer
        self.encoder = encoder or Encoder(tokenizer, add_bos_token=add_bos_token)
        self.max_length = int(max_length)
        continuous = self.config.continuous
        # continuous batching needs a per-row cache index (`forward_cached`'s index as int32[B]),
        # which the model declares (`contract.Capabilities`; our decoders do)
        if continuous is None:
            continuous = capabilities_of(self.spec).per_row_cache_index
        self.continuous = bool(continuous)
        # requests -> prompts (`prompts.build_prompts`, lm-eval's rules)
        self.rules = prompt_rules(
            self.encoder,
            config=self.config,
            tokenizer=tokenizer,
            generation_config=load_generation_config(getattr(model, "path", None), model.hf_config),
            hf_config=model.hf_config,
            max_length=self.max_length,
            eot_token_id=eot_token_id,
        )
        self.shards = batch_shards(self.mesh)
        self.replicated = replicated(self.mesh)
        table, lengths = token_bytes(tokenizer, self.spec.vocab_size, BUFFER_BYTES)
        self.stop_table = StopTable(
            bytes=put_global(table, self.replicated),
            lengths=put_global(lengths, self.replicated),
        )
        self.executables = Executables("jaxeval-gen-compile", store=True)
        self.stats: dict[str, float] = {}

    @property
    def compile_count(self) -> int:
        return self.executables.compile_count

    @property
    def engine_target(self) -> EngineTarget:
        """What continuous batching runs on: this generator's model, runtime, parameters, stop
        table and executables."""
        return EngineTarget(
            spec=self.spec,
            runtime=self.runtime,
            params=self.params,
            stop_table=self.stop_table,
            executables=self.executables,
        )

    @property
    def compile_seconds(self) -> float:
        return self.executables.compile_seconds

    # ---- running --------------------------------------------------------------------------
    def run_prompts(
        self,
        prompts: Sequence[Prompt],
        on_batch: Callable[[int, int], None] | None = None,
        on_rows: Callable[[Rows], None] | None = None,
    ) -> dict[int, tuple[list[int], int]]:
        """Generates every copy of every prompt: request position -> (token ids, end reason).
        `on_rows` receives each batch's [(position, token ids, end reason)] as it finishes, and
        `on_batch(rows, generated tokens)` their counts.

        Continuous batching (`jaxeval.lm.generate.engine`) by default; `continuous=False` runs the static
        batches of `gen_static` (each decodes until its longest row ends)."""
        reasons = [0, 0, 0]

        def finished(rows: Rows) -> None:
            for _, _, reason in rows:
                reasons[reason] += 1
            if on_batch is not None:
                on_batch(len(rows), sum(len(t) for _, t, _ in rows))
            if on_rows is not None:
                on_rows(rows)

        with phases.phase("dispatch"):
            if self.continuous:
                out, stats = run_continuous(self, prompts, on_rows=finished)
                stats["batches"] = stats["admissions"]
            else:
                out, stats = run_static(self, prompts, on_rows=finished)
        phases.count("generated_tokens", sum(len(toks) for toks, _ in out.values()))
        expected = {pos for pr in prompts for pos in pr.outputs}
        if set(out) != expected:
            raise AssertionError(f"requests {sorted(expected - set(out))[:10]} were not answered")
        for name, value in stats.items():
            self.stats[name] = self.stats.get(name, 0) + value
        for name, n in zip(_REASONS, reasons):
            self.stats[name] = self.stats.get(name, 0) + n
        return out

    def generate_tokens(
        self, requests: Sequence[tuple[str, dict]], *, same: Sequence[int] | None = None
    ) -> list[list[int]]:
        """The generated token ids per request (a final stop token included), before decoding."""
        self.stats = {}
        rows = self.run_prompts(build_prompts(self.rules, requests, same=same))
        return [rows[i][0] for i in range(len(requests))]

    def generate_until(
        self,
        requests: Sequence[tuple[str, dict]],
        *,
        same: Sequence[int] | None = None,
        disable_tqdm: bool = False,
        on_answers: Callable[[list[int], list[str]], None] | None = None,
    ) -> list[str]:
        """(context, gen_kwargs) per request -> generated text per request, in order.
        `on_answers(positions, texts)` gets each batch's final texts as the batch finishes (a text
        that still needs the host-side stop-string retry comes after the retry)."""
        if not requests:
            return []
        start = time.perf_counter()
        self.stats = {}
        with phases.phase("tokenize"):
            prompts = build_prompts(self.rules, requests, same=same)
        by_output = {pos: pr for pr in prompts for pos in pr.outputs}
        compiled_before = self.executables.stats()
        bar = tqdm(
            total=len(requests),
            desc="Running generate_until requests",
            disable=disable_tqdm,
            unit="req",
        )
        counts = {"tokens": 0, "t0": time.perf_counter()}

        def on_batch(n_rows: int, n_tokens: int) -> None:
            counts["tokens"] += n_tokens
            bar.update(n_rows)
            elapsed = max(1e-9, time.perf_counter() - counts["t0"])
            bar.set_postfix(gen_tok_s=f"{counts['tokens'] / elapsed:.0f}")

        def answered(rows: list[tuple[int, list[int], int]]) -> None:
            final = []
            for pos, toks, reason in rows:
                text = self.tokenizer.decode(toks, skip_special_tokens=True)
                until = by_output[pos].settings.until
                if not (reason == STOP_STRING and not contains_stop(text, until)):
                    final.append((pos, cut_at_stops(text, until)))
            if final:
                on_answers([p for p, _ in final], [t for _, t in final])

        rows = self.run_prompts(prompts, on_batch, answered if on_answers is not None else None)
        texts: list[str] = [""] * len(requests)
        retry: dict[int, Prompt] = {}
        for pos, (toks, reason) in rows.items():
            pr = by_output[pos]
            text = self.tokenizer.decode(toks, skip_special_tokens=True)
            if reason == STOP_STRING and not contains_stop(text, pr.settings.until):
                retry[id(pr)] = pr
            texts[pos] = cut_at_stops(text, pr.settings.until)
        if retry:
            redo = [
                dataclasses.replace(
                    pr,
                    stops=stop_rows(
                        pr.settings.until,
                        eos_ids=self.rules.eos_ids,
                        specials=self.rules.specials,
                        device_strings=False,
                    ),
                )
                for pr in retry.values()
            ]
            redone = self.run_prompts(redo).items()
            for pos, (toks, _) in redone:
                text = self.tokenizer.decode(toks, skip_special_tokens=True)
                texts[pos] = cut_at_stops(text, by_output[pos].settings.until)
            if on_answers is not None:
                on_answers([pos for pos, _ in redone], [texts[pos] for pos, _ in redone])
        bar.close()
        self.stats.update(
            requests=len(requests),
            generated_tokens=counts["tokens"],
            total_s=time.perf_counter() - start,
            retried_prompts=len(retry),
        )
        compiled = self.executables.stats()
        self.stats.update(
            {k: v - compiled_before[k] for k, v in compiled.items() if k != "compile_count"},
            compile_count=self.compile_count,
        )
        return texts


def generate_until(
    requests: Sequence[Any],
    *,
    model: Any,
    tokenizer: Any,
    max_length: int,
    disable_tqdm: bool = False,
    on_answers: Callable[[list[int], list[str]], None] | None = None,
    encoder: Encoder | None = None,
    **settings: Any,
) -> list[str]:
    """One call's `generate_until` for a `LoadedModel` on a Generator built for it.

    `requests`: Instances with `args = (context, gen_kwargs)` (repeats listed consecutively as the
    same object), or plain `(context, gen_kwargs)` tuples; `settings` are `GenConfig`'s fields.
    Returns one string per request, in order. Repeated calls should keep a `Generator` (as
    `JaxLM` does), which keeps its compiled executables.
    """
    gen = Generator(
        model=model, tokenizer=tokenizer, max_length=max_length, encoder=encoder, **settings
    )
    pairs, same = request_pairs(requests)
    return gen.generate_until(pairs, same=same, disable_tqdm=disable_tqdm, on_answers=on_answers)
