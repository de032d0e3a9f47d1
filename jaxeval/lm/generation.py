"""`generate_until` with lm-eval 0.4.13's HF semantics on the compiled generation kernel.

    texts = generate_until(requests, model=loaded, tokenizer=tok, max_length=2048, batch_size=16)

Per request `(context, gen_kwargs)`, exactly as `HFLM.generate_until`:

1. `gen_kwargs` normalized (`gen_kwargs.normalize`): stop strings with the EOS string appended,
   `max_gen_toks`, greedy or sampling settings.
2. The context encoded with lm-eval's BOS rules (`encoding.Encoder.tok_encode`) and left-truncated
   to `max_length - max_gen_toks` tokens.
3. Generation stops at the model's `generation_config` EOS id(s), at a stop string (found on device
   in the decoded bytes, see `kernels/stop_match.py`) or after `max_gen_toks` tokens.
4. The generated tokens are decoded with `skip_special_tokens=True` and cut at the earliest stop
   string on the host; nothing else is stripped.

Requests are batched across different gen_kwargs (every setting is per row, so a row's output does
not depend on its batch); lm-eval groups by gen_kwargs only because HF `generate` takes one setting
per call. Sampling keys come from (seed, distinct request index, repeat index).

Should the device stop a row on a stop string that the full decode does not contain (possible only
with decoders that rewrite text, e.g. `clean_up_tokenization_spaces` or a stripped leading space),
the host notices and regenerates that row without device stop strings, so a row is never cut early.

On a mesh spanning several processes every process plans the same batches (checked by digest),
places its own shards of them (`mesh.put_global`) and reads the replicated results (`mesh.to_host`),
so every process decodes the same texts and takes the same retry decisions.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from tqdm.auto import tqdm

from jaxeval import distributed
from jaxeval.errors import JaxevalError
from jaxeval.kernels.generate import STOP_STRING, GenerateBatch, GenerateResult, StopTable, generate
from jaxeval.lm.encoding import Encoder
from jaxeval.lm.gen_engine import MIN_PREFIX, run_continuous
from jaxeval.lm.gen_kwargs import DEFAULT_MAX_GEN_TOKS, SamplingDefaults, normalize
from jaxeval.lm.gen_plan import GenShape, PlannedGenBatch, Prompt, gen_plan_digest, plan_gen_batches
from jaxeval.lm.gen_stops import (
    BUFFER_BYTES,
    contains_stop,
    cut_at_stops,
    special_token_ids,
    stop_rows,
    token_bytes,
)
from jaxeval.mesh import batch_shardings, batch_shards, place_params, put_global, to_host
from jaxeval.models.spec import ModelSpec

DEFAULT_SEED = 1234  # lm-eval's default torch seed


def load_generation_config(path: str | None, hf_config: Any) -> Any:
    """The model's `GenerationConfig` as transformers builds it (file, else from the model config)."""
    from transformers import GenerationConfig

    if path and os.path.isfile(os.path.join(path, "generation_config.json")):
        return GenerationConfig.from_pretrained(path)
    return GenerationConfig.from_model_config(hf_config)


def eos_ids_of(gen_config: Any, hf_config: Any) -> tuple[int, ...]:
    """The EOS id(s) HF `generate` stops on: generation_config's, else the model config's."""
    eos = getattr(gen_config, "eos_token_id", None)
    if eos is None:
        eos = getattr(hf_config, "eos_token_id", None)
    if eos is None:
        return ()
    return tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))


class Generator:
    """Compiled generation for one model, tokenizer and mesh; reusable across calls.

    gen = Generator(model=loaded, tokenizer=tok, max_length=512, batch_size=8)
    gen.generate_until([("Q: 2+2?\\nA:", {"until": ["\\n"], "max_gen_toks": 16})])  -> [" 4"]
    gen.compile_count  -> distinct bucket shapes compiled so far
    """

    def __init__(
        self,
        *,
        model: Any,
        tokenizer: Any,
        max_length: int,
        batch_size: int = 16,
        encoder: Encoder | None = None,
        add_bos_token: bool | None = None,
        eot_token_id: int | None = None,
        default_max_gen_toks: int = DEFAULT_MAX_GEN_TOKS,
        seed: int = DEFAULT_SEED,
        shrink_last_batch: bool = True,
        continuous: bool | None = None,
        min_prefix: int = MIN_PREFIX,
        refill_rows: int | None = None,
        admission: str = "longest",
        tail: bool = True,
    ):
        self.spec = model.spec
        self.mesh: Mesh = model.mesh
        self.params = place_params(model.params, self.mesh)
        self.tokenizer = tokenizer
        self.encoder = encoder or Encoder(tokenizer, add_bos_token=add_bos_token)
        self.max_length = int(max_length)
        self.batch_size = max(1, int(batch_size))
        self.default_max_gen_toks = int(default_max_gen_toks)
        self.seed = int(seed)
        self.shrink_last_batch = bool(shrink_last_batch)
        # continuous batching needs a per-row cache index (`forward_cached`'s index as int32[B]):
        # our decoders have it; another model opts in with `per_row_cache_index = True`
        if continuous is None:
            continuous = isinstance(self.spec, ModelSpec) or bool(
                getattr(self.spec, "per_row_cache_index", False)
            )
        self.continuous = bool(continuous)
        self.min_prefix = int(min_prefix)
        self.refill_rows = refill_rows
        self.admission = admission  # "longest" (expected output, then prompt) or "request" order
        self.tail = bool(tail)  # the queue's tail decodes in smaller engines (gen_engine.tail_rows)
        eot = tokenizer.eos_token_id if eot_token_id is None else eot_token_id
        self.eos_string = (
            tokenizer.decode(eot, skip_special_tokens=False) if eot is not None else None
        )
        gen_config = load_generation_config(getattr(model, "path", None), model.hf_config)
        self.eos_ids = eos_ids_of(gen_config, model.hf_config)
        self.sampling_defaults = SamplingDefaults.from_generation_config(gen_config)
        self.specials = special_token_ids(tokenizer)
        self.shards = batch_shards(self.mesh)
        self.replicated = NamedSharding(self.mesh, P())
        vocab = self.spec.vocab_size
        table, lengths = token_bytes(tokenizer, vocab, BUFFER_BYTES)
        self.stop_table = StopTable(
            bytes=put_global(table, self.replicated),
            lengths=put_global(lengths, self.replicated),
        )
        self._compiled: dict[GenShape, Callable] = {}
        # continuous batching's executables compiled ahead on a background thread (gen_engine)
        self._pending: dict[tuple, Future] = {}
        self._compile_pool: ThreadPoolExecutor | None = None
        self.compile_seconds = 0.0
        self.stats: dict[str, float] = {}

    # ---- compilation ----------------------------------------------------------------------
    @property
    def compile_count(self) -> int:
        return len(self._compiled)

    def compiled(self, shape: GenShape, example: GenerateBatch) -> Callable:
        """The executable for one bucket shape (compiled once, ahead of time)."""
        if shape not in self._compiled:
            start = time.perf_counter()
            kernel = functools.partial(
                generate,
                model=self.spec,
                n_new=shape.new,
                copies=shape.copies,
                sample=shape.sample,
                mesh=self.mesh,
            )
            shardings = batch_shardings(self.mesh, example)
            abstract = jax.tree.map(
                lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                example,
                shardings,
            )
            jitted = jax.jit(
                kernel,
                in_shardings=(
                    jax.tree.map(lambda x: x.sharding, self.params),
                    StopTable(self.replicated, self.replicated),
                    shardings,
                    self.replicated,
                ),
                out_shardings=self.replicated,
            )
            seed = jax.ShapeDtypeStruct((), np.int32, sharding=self.replicated)
            self._compiled[shape] = jitted.lower(
                self.params, self.stop_table, abstract, seed
            ).compile()
            self.compile_seconds += time.perf_counter() - start
        return self._compiled[shape]

    # ---- requests -> prompts --------------------------------------------------------------
    def prompts(
        self, requests: Sequence[tuple[str, dict]], *, same: Sequence[int] | None = None
    ) -> list[Prompt]:
        """Distinct prompts with their copies. `same[i]` = position of request i's first copy."""
        same = list(range(len(requests))) if same is None else list(same)
        firsts = sorted(set(same))
        copies: dict[int, list[int]] = {f: [] for f in firsts}
        for i, f in enumerate(same):
            copies[f].append(i)
        contexts = [requests[f][0] for f in firsts]
        encoded = self.encoder.tok_encode_many(contexts)
        out = []
        for k, (f, ids) in enumerate(zip(firsts, encoded)):
            context, gen_kwargs = requests[f]
            if not isinstance(context, str):
                raise JaxevalError(f"request {f}: the context must be a string, got {context!r}")
            try:
                settings = normalize(
                    gen_kwargs,
                    eos=self.eos_string,
                    default_max_gen_toks=self.default_max_gen_toks,
                    sampling_defaults=self.sampling_defaults,
                )
            except JaxevalError as err:
                raise err.located(doc=f) from None
            max_ctx = self.max_length - settings.max_gen_toks
            if max_ctx <= 0:
                raise JaxevalError(
                    f"max_gen_toks ({settings.max_gen_toks}) must be less than the model's "
                    f"max_length ({self.max_length})",
                    field="max_gen_toks",
                )
            ids = list(ids)[-max_ctx:]
            if not ids:
                raise JaxevalError(
                    f"request {f}: the context encodes to no tokens (empty prompt)",
                    hint="give a non-empty context or a tokenizer that adds BOS",
                )
            stops = stop_rows(settings.until, eos_ids=self.eos_ids, specials=self.specials)
            out.append(
                Prompt(
                    tokens=tuple(int(t) for t in ids),
                    settings=settings,
                    stops=stops,
                    request_index=k,
                    outputs=tuple(copies[f]),
                )
            )
        return out

    # ---- running --------------------------------------------------------------------------
    def _run(
        self,
        plan: list[PlannedGenBatch],
        on_batch: Callable[[int, int], None],
        on_result: Callable[[PlannedGenBatch, GenerateResult], None] | None = None,
    ) -> list[tuple[PlannedGenBatch, GenerateResult]]:
        seed = put_global(np.int32(self.seed), self.replicated)
        pending, done = [], []

        def collect(item):
            pb, out = item
            res = GenerateResult(*to_host(tuple(out)))
            done.append((pb, res))
            if on_result is not None:
                on_result(pb, res)
            on_batch(int((pb.rows >= 0).sum()), int(res.length.sum()))

        for pb in plan:
            fn = self.compiled(pb.shape, pb.batch)
            batch = put_global(pb.batch, batch_shardings(self.mesh, pb.batch))
            pending.append((pb, fn(self.params, self.stop_table, batch, seed)))
            if len(pending) > 1:  # keep one batch queued while the host decodes the last
                collect(pending.pop(0))
        for item in pending:
            collect(item)
        return done

    def run_prompts(
        self,
        prompts: Sequence[Prompt],
        on_batch: Callable[[int, int], None] | None = None,
        on_rows: Callable[[list[tuple[int, list[int], int]]], None] | None = None,
    ) -> dict[int, tuple[list[int], int]]:
        """Generates every copy of every prompt: request position -> (token ids, end reason).
        `on_rows` receives each batch's [(position, token ids, end reason)] as it finishes.

        Continuous batching (`jaxeval.lm.gen_engine`) by default; `continuous=False` runs the static
        batches of `plan_gen_batches` (each decodes until its longest row ends)."""
        if self.continuous:
            return self._run_continuous(prompts, on_batch, on_rows)
        plan = plan_gen_batches(
            prompts,
            batch_size=self.batch_size,
            shards=self.shards,
            shrink_last=self.shrink_last_batch,
        )
        if jax.process_count() > 1:
            distributed.check_same("generation plan", gen_plan_digest(plan))
        out: dict[int, tuple[list[int], int]] = {}
        steps = 0
        reasons = [0, 0, 0]

        def batch_rows(pb: PlannedGenBatch, res: GenerateResult) -> None:
            if on_rows is not None:
                rows = [
                    (int(pos), res.tokens[r, : res.length[r]].tolist(), int(res.reason[r]))
                    for r, pos in enumerate(pb.rows)
                    if pos >= 0
                ]
                on_rows(rows)

        for pb, res in self._run(plan, on_batch or (lambda n, t: None), batch_rows):
            steps += int(res.steps)
            for r, pos in enumerate(pb.rows):
                if pos < 0:
                    continue
                if int(pos) in out:
                    raise AssertionError(f"request {pos} answered twice")
                out[int(pos)] = (res.tokens[r, : res.length[r]].tolist(), int(res.reason[r]))
                reasons[int(res.reason[r])] += 1
        expected = {pos for pr in prompts for pos in pr.outputs}
        if set(out) != expected:
            raise AssertionError(f"requests {sorted(expected - set(out))[:10]} were not answered")
        self.stats["batches"] = self.stats.get("batches", 0) + len(plan)
        self.stats["decode_steps"] = self.stats.get("decode_steps", 0) + steps
        for name, n in zip(("ended_budget", "ended_stop_token", "ended_stop_string"), reasons):
            self.stats[name] = self.stats.get(name, 0) + n
        return out

    def _run_continuous(
        self,
        prompts: Sequence[Prompt],
        on_batch: Callable[[int, int], None] | None,
        on_rows: Callable[[list[tuple[int, list[int], int]]], None] | None,
    ) -> dict[int, tuple[list[int], int]]:
        reasons = [0, 0, 0]

        def finished(rows: list[tuple[int, list[int], int]]) -> None:
            for _, _, reason in rows:
                reasons[reason] += 1
            if on_batch is not None:
                on_batch(len(rows), sum(len(t) for _, t, _ in rows))
            if on_rows is not None:
                on_rows(rows)

        out, stats = run_continuous(
            self,
            prompts,
            on_rows=finished,
            refill_rows=self.refill_rows,
            min_prefix=self.min_prefix,
            admission=self.admission,
            tail=self.tail,
        )
        expected = {pos for pr in prompts for pos in pr.outputs}
        if set(out) != expected:
            raise AssertionError(f"requests {sorted(expected - set(out))[:10]} were not answered")
        for name, value in stats.items():
            self.stats[name] = self.stats.get(name, 0) + value
        self.stats["batches"] = self.stats.get("batches", 0) + stats["admissions"]
        for name, n in zip(("ended_budget", "ended_stop_token", "ended_stop_string"), reasons):
            self.stats[name] = self.stats.get(name, 0) + n
        return out

    def generate_tokens(
        self, requests: Sequence[tuple[str, dict]], *, same: Sequence[int] | None = None
    ) -> list[list[int]]:
        """The generated token ids per request (a final stop token included), before decoding."""
        self.stats = {}
        rows = self.run_prompts(self.prompts(requests, same=same))
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
        prompts = self.prompts(requests, same=same)
        by_output = {pos: pr for pr in prompts for pos in pr.outputs}
        compiled_before = self.compile_seconds
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
                        eos_ids=self.eos_ids,
                        specials=self.specials,
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
            compile_s=self.compile_seconds - compiled_before,
            total_s=time.perf_counter() - start,
            compile_count=self.compile_count,
            retried_prompts=len(retry),
        )
        return texts


def request_pairs(requests: Sequence[Any]) -> tuple[list[tuple[str, dict]], list[int]]:
    """lm-eval Instances (or (context, gen_kwargs) tuples) -> pairs, and each one's first copy.

    The evaluator expands `repeats` by listing the same Instance object consecutively; those rows
    share a prompt (one prefill) and differ only in their repeat index.
    """
    pairs, same, first = [], [], {}
    for i, req in enumerate(requests):
        args = req.args if hasattr(req, "args") else tuple(req)
        context, gen_kwargs = args[0], (args[1] if len(args) > 1 else {})
        pairs.append((context, dict(gen_kwargs or {})))
        key = id(req) if hasattr(req, "args") else None
        if key is not None and key in first:
            same.append(first[key])
        else:
            if key is not None:
                first[key] = i
            same.append(i)
    return pairs, same


_GENERATORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def generate_until(
    requests: Sequence[Any],
    *,
    model: Any,
    tokenizer: Any,
    disable_tqdm: bool = False,
    on_answers: Callable[[list[int], list[str]], None] | None = None,
    **settings: Any,
) -> list[str]:
    """lm-eval's `generate_until` for a `LoadedModel`; the compiled Generator is cached per model.

    `requests`: Instances with `args = (context, gen_kwargs)` (repeats listed consecutively as the
    same object), or plain `(context, gen_kwargs)` tuples. `settings` are `Generator`'s keyword
    arguments (`max_length`, `batch_size`, `encoder`, ...). Returns one string per request, in order.
    """
    encoder = settings.pop("encoder", None)
    key = (id(tokenizer), tuple(sorted(settings.items())))
    per_model = _GENERATORS.setdefault(model, {})
    gen = per_model.get(key)
    if gen is None or (encoder is not None and gen.encoder is not encoder):
        gen = Generator(model=model, tokenizer=tokenizer, encoder=encoder, **settings)
        per_model[key] = gen
    pairs, same = request_pairs(requests)
    return gen.generate_until(pairs, same=same, disable_tqdm=disable_tqdm, on_answers=on_answers)
