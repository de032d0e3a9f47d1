"""`JaxLM`: the lm-eval `LM` interface on a JAX model, registered as both "jax" and "hf".

    lm = JaxLM(pretrained="/ckpt/llama", dtype="float32", mesh="data", batch_size=8)
    lm.loglikelihood([Instance("loglikelihood", doc, ("Question: 2+2?\\nAnswer:", " 4"), 0)])
    -> [(-3.21, False)]
    lm.loglikelihood_rolling([Instance("loglikelihood_rolling", doc, ("some document",), 0)])
    -> [-153.8]

Requests are encoded exactly as lm-eval's HF backend encodes them (`jaxeval.lm.encoding`), planned
into packed fixed-shape batches on the host (`jaxeval.lm.score.planner`), and scored by one compiled
kernel per batch shape, compiled when a plan first uses it (`jaxeval.lm.score.scorer`) and kept in JAX's
persistent compilation cache (`jaxeval.platform.compile_cache`). `batch_size` keeps its lm-eval spelling
(`N`, `auto`, `auto:N`) but does not set the scoring batches: rows are packed, so a batch holds a
token budget (`token_budget`, default `auto_token_budget`: from the model's width and the device's
memory, never from max_length), and each bucket's last batch is cut to the rows it has. For
generation, N sets the rows per batch (at least 64, cut to the memory).

Several JAX processes (`jaxeval.platform.distributed`) form ONE logical evaluator: `rank` 0 and
`world_size` 1 on every process (documents are never strided), the mesh spans every process's
devices, each process runs the same plan, and only `is_main_process` (process 0) writes results.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from jaxeval.cache import fingerprint_of
from jaxeval.errors import JaxevalError
from jaxeval.lm.answers import on_scored_documents, on_scored_pairs
from jaxeval.lm.base import LM, MODELS
from jaxeval.lm.encoding import rolling_windows, truncate_request
from jaxeval.lm.fingerprint import answer_identity, files_identity
from jaxeval.lm.generate.generator import Generator
from jaxeval.lm.generate.plan import request_pairs
from jaxeval.lm.model_config import JaxLMConfig
from jaxeval.lm.non_finite import non_finite_error, request_where
from jaxeval.lm.progress import TokenProgress
from jaxeval.lm.score.buckets import BucketSet
from jaxeval.lm.score.budget import device_free_bytes
from jaxeval.lm.score.planner import ScorePlan, plan_score_batches
from jaxeval.lm.score.scorer import BatchAnswers, Scorer, skipped
from jaxeval.lm.setup import RunSetup, run_setup, run_tokenizer
from jaxeval.models import LoadedModel, load_model
from jaxeval.models.contract import capabilities_of
from jaxeval.models.runtime import make_runtime
from jaxeval.platform import compile_cache, phases
from jaxeval.platform.mesh import make_mesh, spans_all_processes

_SUMMED_STATS = ("requests", "real_tokens", "computed_tokens", "batches", "compilations")
_SUMMED_STATS += ("computed_points", "cache_hits", "compile_s", "plan_s", "run_s")


def truncate_all(encoded: Sequence[tuple[Sequence[int], Sequence[int]]], max_length: int) -> list:
    """`truncate_request` over every request; lm-eval's assertions become a `JaxevalError`."""
    out = []
    for i, (ctx, cont) in enumerate(encoded):
        try:
            out.append(truncate_request(ctx, cont, max_length))
        except ValueError as e:
            raise JaxevalError(
                f"request {i}: {e}",
                field="max_length",
                hint="raise max_length in --model_args (up to the model's context) or shorten "
                "the task's continuations",
            ) from None
    return out


class JaxLM(LM):
    """A JAX model behind lm-eval's three request methods (generation: issue #5).

    Each request method also takes the response cache's (`jaxeval.cache`) two keywords:
    `known` = {position in the request list: stored answer}, returned as given (scoring: the
    whole call is planned as before and only batches holding an unknown request run, so a
    resumed run recomputes the very batches of the interrupted one, bit for bit), and
    `on_answers(positions, answers)`, called as answers are computed (after each kernel batch).
    """

    def __init__(self, pretrained: Any = None, *, config: JaxLMConfig | None = None, **kwargs: Any):
        """`JaxLM(pretrained=..., **model_args)` or `JaxLM(config=JaxLMConfig(...))`; the arguments
        are `JaxLMConfig`'s fields (unknown names are an error that lists them)."""
        if config is None:
            config = JaxLMConfig.from_kwargs({"pretrained": pretrained, **kwargs})
        elif pretrained is not None or kwargs:
            raise JaxevalError("give either config= or model arguments, not both", field="config")
        self.config = config
        self.compilation_cache = compile_cache.enable(config.compilation_cache)
        loaded, self.mesh = self._load(config)
        self.loaded = self._with_runtime(loaded, self.mesh, config.attention, config.experts)
        self._tokenizer = run_tokenizer(
            config, path=self.loaded.path, gguf_file=self.loaded.gguf_file
        )
        # what the run decides before any request: the same function `jaxeval plan` calls
        self.setup = run_setup(
            config,
            spec=self.loaded.spec,
            hf_config=self.loaded.hf_config,
            path=self.loaded.path,
            tokenizer=self._tokenizer,
            mesh=self.mesh,
            free_bytes=device_free_bytes(self.mesh),
            params=self.loaded.params,
        )
        self._adopt(self.setup)
        self.scorer = Scorer(
            model=self.loaded.spec,
            params=self.loaded.params,
            mesh=self.mesh,
            runtime=self.loaded.runtime,
            buckets=self.buckets,
            vocab_chunk=config.vocab_chunk,
        )

    def _adopt(self, setup: RunSetup) -> None:
        """What the request methods read, from the run's setup (`DryRunLM` starts here too)."""
        self.setup, config = setup, setup.config
        self._tokenizer = setup.tokenizer
        self.encoder = setup.encoder
        self._max_length = setup.max_length
        self.batch_size = config.batch_size
        self.max_batch_size = int(config.max_batch_size)
        self.gen_config = config.gen_config
        self.token_budget = setup.token_budget
        self.buckets: BucketSet = setup.buckets
        self.packing = bool(config.packing)
        self.shared_context = bool(config.shared_context)
        self.point_cost = setup.point_cost
        self.generator: Generator | None = None  # built by the first generate_until, then kept
        self.last_plan: ScorePlan | None = None
        self.stats: dict[str, float] = {}  # the last scoring call
        self.first_scored_at: float | None = None  # perf_counter() when the first batch came back
        self.first_dispatched_at: float | None = None  # ... when it was handed to the device
        self.totals: dict[str, float] = {}  # every scoring call so far (reported in model_info)

    @staticmethod
    def _load(config: JaxLMConfig) -> tuple[LoadedModel, Mesh]:
        """The model on its mesh: a given `LoadedModel` keeps its own mesh; otherwise the mesh is
        built (a preset name, or `data` over several devices) and the checkpoint loaded onto it."""
        if isinstance(config.pretrained, LoadedModel):
            mesh = config.pretrained.mesh
        elif isinstance(config.mesh, str) or config.mesh is None:
            mesh = make_mesh(config.mesh or ("data" if len(jax.devices()) > 1 else "single"))
        else:
            mesh = config.mesh
        if not spans_all_processes(mesh):  # every process must take part in every kernel call
            raise JaxevalError(
                f"the mesh {dict(mesh.shape)} does not include devices of every one of the "
                f"{jax.process_count()} processes",
                field="mesh",
                hint="use a preset over all devices, e.g. mesh=data",
            )
        if isinstance(config.pretrained, LoadedModel):
            return config.pretrained, mesh
        loaded = load_model(
            str(config.pretrained),
            mesh=mesh,
            dtype=config.dtype,
            revision=config.revision,
            trust_remote_code=config.trust_remote_code,
            gguf_file=config.gguf_file,
        )
        return loaded, mesh

    @staticmethod
    def _with_runtime(
        loaded: LoadedModel, mesh: Mesh, attention: str | None, experts: str | None
    ) -> LoadedModel:
        """The model with its runtime for `mesh` (`runtime.make_runtime`: the attention and expert
        backends, chosen once here, static in every executable's key); a model that does not run
        on the backends (`contract.Capabilities`) runs on the reference runtime of its mesh."""
        if not capabilities_of(loaded.spec).backends:
            return loaded
        runtime = make_runtime(mesh, attention, experts)
        if runtime == loaded.runtime:
            return loaded
        return dataclasses.replace(loaded, runtime=runtime)

    # ---- lm-eval's properties -----------------------------------------------------------
    @property
    def is_main_process(self) -> bool:
        """Process 0 of a multi-process run (the only one that writes files); True alone."""
        return jax.process_index() == 0

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def eot_token_id(self) -> int | None:
        return self._tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int | None:
        return self.encoder.prefix_token_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def max_gen_toks(self) -> int:
        return 256

    @property
    def tokenizer_name(self) -> str:
        return self._tokenizer.name_or_path.replace("/", "__")

    def tok_encode(
        self, string: str, add_special_tokens: bool | None = None, **kwargs: Any
    ) -> list[int]:
        return self.encoder.tok_encode(string, add_special_tokens, kwargs.get("left_truncate_len"))

    def tok_decode(self, tokens: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        import jinja2

        kwargs = dict(
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
        )
        try:
            return self._tokenizer.apply_chat_template(chat_history, **kwargs)
        except jinja2.exceptions.TemplateError:
            chat_history = [m for m in chat_history if m["role"] != "system"]
            return self._tokenizer.apply_chat_template(chat_history, **kwargs)

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        if chat_template is False or chat_template is None:
            return None
        template = getattr(self._tokenizer, "chat_template", None)
        if isinstance(template, dict):
            name = chat_template if isinstance(chat_template, str) else "default"
            return template.get(name)
        return template

    def model_info(self) -> dict[str, Any]:
        spec, runtime = self.loaded.spec, self.loaded.runtime
        ours = capabilities_of(spec).backends  # another model runs its own way
        return {
            "model_type": spec.model_type,
            "model_num_parameters": int(spec.param_count(self.loaded.params)),
            "model_dtype": str(jax.tree.leaves(self.loaded.params)[0].dtype),
            "max_length": self._max_length,
            "token_budget": self.token_budget,
            "mesh": dict(self.mesh.shape),
            "compilation_cache": self.compilation_cache,
            "attention": runtime.attention.name if ours else "model's own",
            "experts": runtime.experts.name if ours and spec.moe is not None else None,
            "scoring_stats": dict(self.totals),
            "generation_stats": self.generator.executables.stats() if self.generator else {},
        }

    # ---- requests -------------------------------------------------------------------------
    def loglikelihood(
        self,
        requests: Sequence[Any],
        disable_tqdm: bool = False,
        *,
        known: dict[int, tuple[float, bool]] | None = None,
        on_answers: Callable[[list[int], list[tuple[float, bool]]], None] | None = None,
    ) -> list[tuple[float, bool]]:
        """(context, continuation) per request -> (logprob, is_greedy) per request, in order;
        `known` and `on_answers` as in the class docstring."""
        pairs = [tuple(req.args[:2]) for req in requests]
        with phases.phase("tokenize"):
            encoded = self.encoder.encode_requests(pairs)
        ll, greedy = self.loglikelihood_tokens(
            encoded,
            disable_tqdm=disable_tqdm,
            desc="loglikelihood",
            known=known,
            on_scored=None if on_answers is None else on_scored_pairs(on_answers),
            describe=lambda i: request_where(requests[i]),
        )
        return [(float(a), bool(b)) for a, b in zip(ll, greedy)]

    def loglikelihood_rolling(
        self,
        requests: Sequence[Any],
        disable_tqdm: bool = False,
        *,
        known: dict[int, float] | None = None,
        on_answers: Callable[[list[int], list[float]], None] | None = None,
    ) -> list[float]:
        """(text,) per request -> its summed logprob over the rolling windows, in order; `known`
        and `on_answers` as in the class docstring (`on_answers` gets a document once the last of
        its windows is scored)."""
        texts = [req.args[0] for req in requests]
        windows: list[tuple[list[int], list[int]]] = []
        owner: list[int] = []  # per window, its document
        first: list[int] = []  # per document, its first window
        with phases.phase("tokenize"):
            documents = self.encoder.tok_encode_many(texts)
        for i, ids in enumerate(documents):
            w = self._rolling(ids)
            first.append(len(windows))
            windows.extend(w)
            owner.extend([i] * len(w))
        known = known or {}
        ll, _ = self.loglikelihood_tokens(
            windows,
            disable_tqdm=disable_tqdm,
            desc="loglikelihood_rolling",
            on_scored=None if on_answers is None else on_scored_documents(on_answers, owner),
            known={w: (0.0, False) for w, doc in enumerate(owner) if doc in known} or None,
            describe=lambda w: {
                **request_where(requests[owner[w]]),
                "request": owner[w],
                "window": w - first[owner[w]],  # among the document's windows
            },
        )
        totals = [0.0] * len(texts)
        for i, value in zip(owner, ll):  # Python-float sums in window order, as lm-eval does
            totals[i] += float(value)
        for i, value in known.items():
            totals[i] = float(value)
        return totals

    def _rolling(self, ids: list[int]) -> list[tuple[list[int], list[int]]]:
        return rolling_windows(
            ids, prefix_token=self.encoder.required_prefix_token_id, max_length=self._max_length
        )

    def loglikelihood_tokens(
        self,
        encoded: Sequence[tuple[Sequence[int], Sequence[int]]],
        *,
        disable_tqdm: bool = False,
        desc: str = "scoring",
        on_scored: Callable[[BatchAnswers], None] | None = None,
        known: dict[int, tuple[float, bool]] | None = None,
        describe: Callable[[int], dict[str, Any]] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Token-level entry: `(ctx_enc, cont_enc)` pairs -> (loglik float32[R], is_greedy bool[R]).
        `known` answers are returned as given; batches holding only known requests do not run.
        `on_scored` gets each batch that ran as its answers arrive. A non-finite answer is an
        error naming the first such request (`describe(i)`: its task, document and request
        index)."""
        if not encoded:
            return np.zeros(0, np.float32), np.zeros(0, bool)
        for i, (_, cont) in enumerate(encoded):
            if len(cont) == 0:
                raise JaxevalError(
                    f"request {i} has an empty continuation after tokenization (lm-eval asserts on it)"
                )
        start = time.perf_counter()
        with phases.phase("plan"):
            self._check_token_ids(encoded)
            truncated = truncate_all(encoded, self._max_length)
            plan = plan_score_batches(
                truncated,
                self.buckets,
                packing=self.packing,
                shared_context=self.shared_context,
                point_cost=self.point_cost,
            )
        planned = time.perf_counter()
        compiled_before = self.scorer.compile_stats()
        skip = (lambda idx: all(int(i) in known for i in idx)) if known else None
        to_run = [b for b in plan.batches if not (skip and skipped(b, skip))]
        bar = TokenProgress(
            desc,
            tokens=sum(b.real_tokens for b in to_run),
            requests=len(encoded),
            compiles=sum(b not in self.scorer.executables for b in {b.bucket for b in to_run}),
            disable=disable_tqdm or not self.is_main_process,
        )
        first_batch_s = 0.0
        ll = np.full(len(encoded), np.nan, np.float32)
        greedy = np.zeros(len(encoded), bool)
        with phases.phase("dispatch"):
            for answers in self.scorer.run_plan(plan, skip=skip):
                ll[answers.indices] = answers.loglik
                greedy[answers.indices] = answers.greedy
                if answers.ran:
                    arrived = time.perf_counter()
                    first_batch_s = first_batch_s or arrived - start
                    self.first_scored_at = self.first_scored_at or arrived
                    self.first_dispatched_at = self.first_dispatched_at or answers.dispatched_at
                    if on_scored is not None:
                        on_scored(answers)
                bar.batch_done(requests=int(answers.indices.size), tokens=answers.real_tokens)
        phases.count("scored_tokens", sum(b.real_tokens for b in to_run))
        for i, (value, is_greedy) in (known or {}).items():
            ll[i], greedy[i] = value, is_greedy
        bar.close()
        end = time.perf_counter()
        self.last_plan = plan
        compiled = self.scorer.compile_stats()
        self.stats = {
            "requests": len(encoded),
            "plan_s": planned - start,
            "first_batch_s": first_batch_s,  # from the call's start to the first batch's results
            "run_s": end - planned,  # compiles the run loop waited for included
            "real_tokens": plan.real_tokens,
            "computed_tokens": plan.computed_tokens,
            "computed_points": sum(b.bucket.rows * b.bucket.points for b in plan.batches),
            "efficiency": plan.efficiency,
            "batches": len(plan.batches),
            "shapes": len(plan.shapes),
            **{k: v - compiled_before[k] for k, v in compiled.items() if k != "compile_count"},
            "compile_count": self.scorer.compile_count,
        }
        for key in _SUMMED_STATS:
            self.totals[key] = self.totals.get(key, 0) + self.stats[key]
        total = self.totals
        total["efficiency"] = total["real_tokens"] / max(1, total["computed_tokens"])
        total["compile_count"] = self.scorer.compile_count
        if not np.all(np.isfinite(ll)):
            raise non_finite_error(ll, describe)
        return ll, greedy

    def _check_token_ids(self, encoded: Sequence[tuple[Sequence[int], Sequence[int]]]) -> None:
        """Every token id must index the model's embedding table (found before any compute)."""
        vocab = int(getattr(self.setup.spec, "vocab_size", 0) or 0)
        if not vocab:
            return
        for i, (ctx, cont) in enumerate(encoded):
            top = max(max(ctx, default=0), max(cont, default=0))
            if top >= vocab or min(min(ctx, default=0), min(cont, default=0)) < 0:
                raise JaxevalError(
                    f"request {i} has token id {top}, outside the model's vocabulary of {vocab}",
                    field="tokenizer",
                    hint="the tokenizer does not belong to these weights: use the checkpoint's "
                    "own tokenizer (tokenizer=DIR in --model_args)",
                )

    def fingerprint(self) -> str:
        """What the response cache keys answers by (`jaxeval.cache`): the weights', config's and
        tokenizer's files, the loaded config and spec, the tokenizer, every model argument that
        can change an answer, and the resolved dtype and lengths (`jaxeval.lm.fingerprint`)."""
        gguf = getattr(self.loaded, "gguf_file", None)
        paths = [gguf or self.loaded.path, str(getattr(self._tokenizer, "name_or_path", ""))]
        weights = files_identity(paths, hash_weights=bool(self.config.cache_hash_weights))
        return fingerprint_of(**self.fingerprint_parts(weights))

    def fingerprint_parts(self, weights: Any) -> dict[str, Any]:
        """The fingerprint's parts around `weights`, the identity of the weights themselves."""
        return answer_identity(
            config=self.config,
            loaded=self.loaded,
            tokenizer=self._tokenizer,
            weights=weights,
            resolved={
                "dtype": str(jax.tree.leaves(self.loaded.params)[0].dtype),
                "max_length": self._max_length,
                "prefix_token_id": self.encoder.prefix_token_id,
                "eot_token_id": self.eot_token_id,
            },
        )

    def generation(self) -> Generator:
        """This adapter's one `Generator` (built on first use, then kept with its executables)."""
        if self.generator is None:
            self.generator = Generator(
                model=self.loaded,
                tokenizer=self._tokenizer,
                max_length=self._max_length,
                config=self.gen_config,
                encoder=self.encoder,
            )
        return self.generator

    def generate_until(
        self,
        requests: Sequence[Any],
        disable_tqdm: bool = False,
        *,
        known: dict[int, str] | None = None,
        on_answers: Callable[[list[int], list[str]], None] | None = None,
    ) -> list[str]:
        """lm-eval's generate_until on the JAX decode kernels (`jaxeval.lm.generate.generator`);
        `known` texts are returned as given and only the other requests are generated."""
        known = known or {}
        todo = [i for i in range(len(requests)) if i not in known]
        pairs, same = request_pairs([requests[i] for i in todo])
        texts = self.generation().generate_until(
            pairs,
            same=same,
            disable_tqdm=disable_tqdm or not self.is_main_process,
            on_answers=None
            if on_answers is None
            else lambda done, answers: on_answers([todo[p] for p in done], answers),
        )
        out = [known.get(i, "") for i in range(len(requests))]
        for i, text in zip(todo, texts):
            out[i] = text
        return out


def _register() -> None:
    for name in ("jax", "hf"):
        if name not in MODELS:
            MODELS.add(name, JaxLM)


_register()
