"""`Task`: documents in, `Instance`s out, and per-document metrics back, exactly as lm-eval's
`ConfigurableTask` (lm_eval/api/task.py) does it.

    task = Task(TaskConfig.from_dict(yaml_dict))
    task.build_all_requests(limit=10)         # task.instances: one Instance per request
    ...model fills inst.resps...
    task.apply_filters()                      # inst.filtered_resps[filter_name]
    task.process_results(doc, [inst.filtered_resps["none"] for inst in doc_instances])
    -> {"acc": 1.0, "acc_norm": 0.0}
"""

from __future__ import annotations

import ast
import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any

from jaxeval.api import request_cache, scoring
from jaxeval.api.config import TaskConfig
from jaxeval.api.custom_dataset import build_custom_dataset
from jaxeval.api.data import load_task_dataset
from jaxeval.api.instance import Instance
from jaxeval.api.prompt import (
    Message,
    ends_with_whitespace,
    maybe_delimit,
    qa_turn,
    render_messages,
)
from jaxeval.api.samplers import RandomSampler, make_sampler
from jaxeval.api.templates import render
from jaxeval.errors import JaxevalError

log = logging.getLogger(__name__)


class Task:
    """A configured task. Holds its docs, sampler, metrics, filters and built instances."""

    def __init__(
        self,
        config: TaskConfig,
        *,
        data_files: dict[str, str] | None = None,
        data_dir: str | None = None,
    ):
        """`data_files` ({split: path}) replace a hub dataset; `data_dir` (the hub layout) serves
        what a `custom_dataset` function loads (`jaxeval.api.custom_dataset`)."""
        self.config = config
        self.name: str = config.task or "unnamed_task"
        self._data_files = data_files
        self._data_dir = data_dir
        self.metric_table: scoring.MetricTable = scoring.resolve_metrics(config)
        self.filters = scoring.resolve_filters(config)
        self.instances: list[Instance] = []
        self._rendered: dict[tuple[str, int], tuple[dict, str]] = {}  # see `_render`
        self.dataset = self._download()
        self._split_cache: dict[str, list[dict]] = {}
        self.eval_docs = self._eval_docs()
        if not self.eval_docs:
            raise JaxevalError(
                "the evaluation split has no documents",
                task=self.name,
                field=config.test_split and "test_split" or "validation_split",
            )
        self.features = list(self.eval_docs[0].keys())
        self.sampler = self._make_sampler(seed=None)
        self.multiple_input = 0
        self.multiple_target = 0
        self._probe(self.eval_docs[0])

    # ------------------------------------------------------------------ data
    def _download(self) -> Any:
        cfg = self.config
        if callable(cfg.custom_dataset):
            return build_custom_dataset(
                cfg.custom_dataset,
                task=self.name,
                metadata=cfg.metadata or {},
                dataset_kwargs=cfg.dataset_kwargs or {},
                data_dir=self._data_dir,
            )
        return load_task_dataset(
            task=self.name,
            dataset_path=cfg.dataset_path,
            dataset_name=cfg.dataset_name,
            dataset_kwargs=cfg.dataset_kwargs,
            data_files=self._data_files,
        )

    def split_docs(self, split: str, process_docs: Callable | None = None) -> list[dict]:
        key = f"{split}|{id(process_docs)}"
        if key not in self._split_cache:
            if split not in self.dataset:
                raise JaxevalError(
                    f"split '{split}' not in the dataset (it has {sorted(self.dataset)})",
                    task=self.name,
                    field="split",
                    hint="fix the *_split keys or the data_files split names",
                )
            data = self.dataset[split]
            if process_docs is not None:
                data = process_docs(data)
            self._split_cache[key] = [dict(d) for d in data]
        return self._split_cache[key]

    def _eval_docs(self) -> list[dict]:
        cfg = self.config
        split = cfg.test_split or cfg.validation_split
        if split is None:
            raise JaxevalError(
                "the task has neither test_split nor validation_split",
                task=self.name,
                field="test_split",
            )
        return self.split_docs(split, cfg.process_docs)

    def fewshot_docs(self) -> list[dict] | None:
        fs, cfg = self.config.fewshot, self.config
        if fs.split is not None:
            return self.split_docs(fs.split, fs.process_docs)
        if self.config._fewshot_given and fs.samples is not None:  # type: ignore[attr-defined]
            return list(fs.samples() if callable(fs.samples) else fs.samples)
        for split in (cfg.training_split, cfg.validation_split, cfg.test_split):
            if split is not None:
                return self.split_docs(split, cfg.process_docs)
        return None

    def _make_sampler(self, seed: int | None) -> RandomSampler | None:
        fs = self.config.fewshot
        sampler = fs.sampler if self.config._fewshot_given else "default"  # type: ignore[attr-defined]
        try:
            docs = self.fewshot_docs()
        except JaxevalError:
            if (self.config.num_fewshot or 0) > 0:
                raise
            return None
        if docs is None:
            return None
        return make_sampler(
            sampler, docs, seed=seed, fewshot_indices=fs.fewshot_indices, task=self.name
        )

    def set_fewshot_seed(self, seed: int | None) -> None:
        if self.sampler is not None:
            self.sampler.set_seed(seed)

    def set_config(self, **changes: Any) -> None:
        self.config = self.config.replace(**changes)

    # ------------------------------------------------------------------ doc_to_*
    def _render(self, spec: Any, doc: dict, field: str, doc_index: int | None) -> str:
        """The template rendered on the document; an evaluation document's rendering is kept
        (building requests, the few-shot context and scoring each ask for its choices and
        target), found again only for the same template and the very same document object."""
        if doc_index is None:
            return render(spec, doc, task=self.name, field=field, doc_index=doc_index)
        key = (spec, doc_index)
        kept = self._rendered.get(key)
        if kept is not None and kept[0] is doc:
            return kept[1]
        text = render(spec, doc, task=self.name, field=field, doc_index=doc_index)
        self._rendered[key] = (doc, text)
        return text

    def doc_to_text(self, doc: dict, spec: Any = None, *, doc_index: int | None = None) -> Any:
        return self._doc_field("doc_to_text", doc, spec, doc_index)

    def doc_to_target(self, doc: dict, spec: Any = None, *, doc_index: int | None = None) -> Any:
        return self._doc_field("doc_to_target", doc, spec, doc_index, lists=True)

    def _doc_field(
        self, field: str, doc: dict, spec: Any, doc_index: int | None, *, lists: bool = False
    ) -> Any:
        """lm-eval's rule for doc_to_text and doc_to_target: an int is itself, a feature name its
        value, a callable is called, a template is rendered (a digit string becomes an int when
        the task has choices). With `lists` (doc_to_target) a list is itself and a rendering
        that reads as a list literal becomes that list."""
        spec = getattr(self.config, field) if spec is None else spec
        if isinstance(spec, int):
            return spec
        if isinstance(spec, str):
            if spec in self.features:
                return doc[spec]
            text = self._render(spec, doc, field, doc_index)
            if text.isdigit() and self.config.doc_to_choice is not None:
                return ast.literal_eval(text)
            if lists and len(text) >= 2 and text[0] == "[" and text[-1] == "]":
                try:
                    return ast.literal_eval(text)
                except (SyntaxError, ValueError):
                    return text
            return text
        if lists and isinstance(spec, list):
            return spec
        if callable(spec):
            return spec(doc)
        raise JaxevalError(
            f"{field} has unsupported type {type(spec).__name__}", task=self.name, field=field
        )

    def doc_to_choice(
        self, doc: dict, spec: Any = None, *, doc_index: int | None = None
    ) -> list[str]:
        spec = self.config.doc_to_choice if spec is None else spec
        if spec is None:
            raise JaxevalError("doc_to_choice is not set", task=self.name, field="doc_to_choice")
        if isinstance(spec, str):
            if spec in self.features:
                return doc[spec]
            text = self._render(spec, doc, "doc_to_choice", doc_index)
            try:
                return ast.literal_eval(text)
            except (SyntaxError, ValueError):
                raise JaxevalError(
                    f"doc_to_choice rendered {text!r}, which is not a Python list literal",
                    task=self.name,
                    field="doc_to_choice",
                    doc=doc_index,
                ) from None
        if isinstance(spec, list):
            return spec
        if isinstance(spec, dict):
            return list(spec.values())
        if callable(spec):
            return spec(doc)
        raise JaxevalError(
            f"doc_to_choice has unsupported type {type(spec).__name__}",
            task=self.name,
            field="doc_to_choice",
        )

    def doc_to_prefix(self, doc: dict) -> str | None:
        prefix = self.config.gen_prefix
        if prefix is None:
            return None
        return (
            doc[prefix]
            if prefix in self.features
            else self._render(prefix, doc, "gen_prefix", None)
        )

    def _resolve_field(
        self, doc: dict, spec: str | None, field: str, doc_index: int | None
    ) -> str | None:
        if not spec:
            return None
        return doc[spec] if spec in doc else self._render(spec, doc, field, doc_index)

    def _probe(self, doc: dict) -> None:
        """lm-eval's construction-time probe on the first document: multiple inputs / targets."""
        text = self.doc_to_text(doc, doc_index=0)
        target = self.doc_to_target(doc, doc_index=0)
        if self.config.doc_to_choice is not None:
            choices = self.doc_to_choice(doc, doc_index=0)
            if not isinstance(choices, list):
                raise JaxevalError(
                    f"doc_to_choice must give a list, got {type(choices).__name__}",
                    task=self.name,
                    field="doc_to_choice",
                    doc=0,
                )
            if isinstance(text, int):
                self.multiple_input = len(choices)
        if isinstance(target, list):
            self.multiple_target = len(target)

    # ------------------------------------------------------------------ prompts
    def fewshot_context(
        self,
        doc: dict,
        num_fewshot: int,
        *,
        system_instruction: str | None = None,
        apply_chat_template: bool = False,
        fewshot_as_multiturn: bool = False,
        chat_template: Callable | None = None,
        gen_prefix: str | None = None,
        doc_index: int | None = None,
    ) -> str | list[str]:
        cfg, fs = self.config, self.config.fewshot
        template = None
        if apply_chat_template and chat_template is not None:

            def template(turns: list[dict]) -> str:
                return chat_template(turns, add_generation_prompt=not gen_prefix)

        description = self._resolve_field(doc, cfg.description, "description", doc_index) or ""
        system = maybe_delimit(system_instruction, description, cfg.fewshot_delimiter)
        messages = [Message("system", system)] if system else []
        if num_fewshot > 0:
            if self.sampler is None:
                raise JaxevalError(
                    "num_fewshot > 0 but the task has no split to draw examples from",
                    task=self.name,
                    field="fewshot_split",
                    hint="set fewshot_split/training_split or use --num_fewshot 0",
                )
            eval_doc = doc if fs.split == cfg.test_split else None
            for fs_doc in self.sampler.sample(num_fewshot, eval_doc=eval_doc):
                q = self.doc_to_text(fs_doc, fs.doc_to_text)
                c = self.doc_to_choice(fs_doc, fs.doc_to_choice) if fs.doc_to_choice else None
                a = self.doc_to_target(fs_doc, fs.doc_to_target)
                prefix = self._resolve_field(fs_doc, fs.gen_prefix, "gen_prefix", doc_index)
                if self.multiple_input:
                    q, c = c[q], None
                self._check_answer(q, c, a, doc_index)
                messages += qa_turn(
                    q,
                    choices=c,
                    answer=a,
                    gen_prefix=prefix,
                    target_delimiter=fs.target_delimiter,
                    fewshot_delimiter=fs.fewshot_delimiter,
                )
        q = self.doc_to_text(doc, doc_index=doc_index)
        if self.multiple_input:
            choices = self.doc_to_choice(doc, doc_index=doc_index)
            return [
                render_messages(
                    messages + qa_turn(ctx, gen_prefix=gen_prefix, target_delimiter=""),
                    chat_template=template,
                    fewshot_as_multiturn=fewshot_as_multiturn,
                )
                for ctx in choices
            ]
        if not isinstance(q, str):
            raise JaxevalError(
                f"doc_to_text gave {type(q).__name__}, not a string",
                task=self.name,
                field="doc_to_text",
                doc=doc_index,
            )
        c = self.doc_to_choice(doc, doc_index=doc_index) if cfg.doc_to_choice else None
        messages += qa_turn(
            q,
            choices=c,
            gen_prefix=gen_prefix,
            target_delimiter=cfg.target_delimiter,
            fewshot_delimiter="",
        )
        return render_messages(
            messages, chat_template=template, fewshot_as_multiturn=fewshot_as_multiturn
        )

    def _check_answer(self, q: Any, c: Any, a: Any, doc_index: int | None) -> None:
        if not isinstance(q, str):
            raise JaxevalError(
                f"few-shot doc_to_text gave {type(q).__name__}, not a string",
                task=self.name,
                field="doc_to_text",
                doc=doc_index,
            )
        if isinstance(a, int) and not isinstance(a, bool) and c and not 0 <= a < len(c):
            raise JaxevalError(
                f"few-shot target index {a} is outside the {len(c)} choices",
                task=self.name,
                field="doc_to_target",
                doc=doc_index,
            )

    # ------------------------------------------------------------------ requests
    def gold_index(
        self, doc: dict, choices: list[str], doc_index: int | None = None
    ) -> int | list[int]:
        """The gold choice index (or indices); a target outside the choices is an error."""
        gold = (
            self.doc_to_text(doc, doc_index=doc_index)
            if self.multiple_input
            else self.doc_to_target(doc, doc_index=doc_index)
        )
        if not choices:
            raise JaxevalError(
                f"doc_to_choice produced no choices for document {doc_index}",
                task=self.name,
                field="doc_to_choice",
                doc=doc_index,
                hint="a multiple-choice document needs at least one choice: fix doc_to_choice, "
                "or drop such documents in process_docs",
            )
        golds = gold if isinstance(gold, list) else [gold]
        out = []
        for g in golds:
            if isinstance(g, str):
                if g not in choices:
                    raise JaxevalError(
                        f"target {g!r} is not among the choices {choices}",
                        task=self.name,
                        field="doc_to_target",
                        doc=doc_index,
                        hint="fix doc_to_target/doc_to_choice, or drop the document in process_docs",
                    )
                g = choices.index(g)
            if not isinstance(g, int) or not 0 <= g < len(choices):
                raise JaxevalError(
                    f"target index {g!r} is outside the {len(choices)} choices",
                    task=self.name,
                    field="doc_to_target",
                    doc=doc_index,
                )
            out.append(g)
        return out if isinstance(gold, list) else out[0]

    def construct_requests(
        self, doc: dict, ctx: str | list[str], *, metadata: tuple, apply_chat_template: bool = False
    ) -> list[Instance]:
        cfg, kind = self.config, self.config.output_type
        doc_index = metadata[1]
        if kind == "loglikelihood":
            args: Any = (ctx, self.doc_to_target(doc, doc_index=doc_index))
        elif kind == "loglikelihood_rolling":
            args = (self.doc_to_target(doc, doc_index=doc_index),)
        elif kind == "generate_until":
            args = (ctx, copy.deepcopy(cfg.generation_kwargs))
        else:
            choices = self.doc_to_choice(doc, doc_index=doc_index)
            self.gold_index(doc, choices, doc_index)
            delim = cfg.target_delimiter
            if apply_chat_template:
                delim = delim if cfg.gen_prefix and not ends_with_whitespace(cfg.gen_prefix) else ""
            if self.multiple_input:
                cont = self.doc_to_target(doc, doc_index=doc_index)
                pairs = [(c, f"{delim}{cont}") for c in ctx]
            else:
                pairs = [(ctx, f"{delim}{c}") for c in choices]
            if "acc_mutual_info" in self.metrics:
                pairs += [("", f"{delim}{c}") for c in choices]
            return [Instance("loglikelihood", doc, p, i, metadata) for i, p in enumerate(pairs)]
        return [Instance(kind, doc, args, 0, metadata)]

    def doc_iterator(
        self,
        *,
        limit: int | None = None,
        samples: list[int] | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> list[tuple[int, dict]]:
        """(doc_id, doc) pairs: `limit` bounds the global index; ranks stride through documents."""
        if samples:
            n = len(self.eval_docs)
            bad = [i for i in samples if not 0 <= i < n]
            if bad:
                raise JaxevalError(
                    f"--samples indices {bad} are outside [0, {n - 1}]",
                    task=self.name,
                    field="samples",
                )
            picked = [d for i, d in enumerate(self.eval_docs) if i in set(samples)]
            return list(enumerate(picked))[rank::world_size]
        docs = list(enumerate(self.eval_docs))
        end = len(docs) if limit is None else int(limit)
        return docs[rank:end:world_size]

    def build_all_requests(
        self,
        *,
        limit: int | None = None,
        samples: list[int] | None = None,
        rank: int = 0,
        world_size: int = 1,
        system_instruction: str | None = None,
        apply_chat_template: bool = False,
        fewshot_as_multiturn: bool = False,
        chat_template: Callable | None = None,
        cache_requests: str | None = None,
        tokenizer_name: str = "",
    ) -> None:
        """Builds `self.instances`; with `cache_requests`, reads/writes the request cache (all docs)."""
        key = None
        if cache_requests and not samples:
            key = request_cache.cache_key(
                self,
                rank=rank,
                world_size=world_size,
                apply_chat_template=apply_chat_template,
                fewshot_as_multiturn=fewshot_as_multiturn,
                system_instruction=system_instruction,
                tokenizer_name=tokenizer_name if apply_chat_template else "",
            )
            cached = request_cache.load(key) if cache_requests != "refresh" else None
            if cached is not None:
                self.instances = [inst for group in cached[:limit] for inst in group]
                return
        num_fewshot = self.config.num_fewshot or 0
        per_doc: list[list[Instance]] = []
        docs = self.doc_iterator(
            limit=None if key else limit, samples=samples, rank=rank, world_size=world_size
        )
        for doc_id, doc in docs:
            ctx = self.fewshot_context(
                doc,
                num_fewshot,
                system_instruction=system_instruction,
                apply_chat_template=apply_chat_template,
                fewshot_as_multiturn=fewshot_as_multiturn,
                chat_template=chat_template,
                gen_prefix=self.doc_to_prefix(doc),
                doc_index=doc_id,
            )
            per_doc.append(
                self.construct_requests(
                    doc,
                    ctx,
                    metadata=(self.name, doc_id, self.config.repeats),
                    apply_chat_template=apply_chat_template,
                )
            )
        if key:
            request_cache.save(key, per_doc)
        self.instances = [inst for group in per_doc[:limit] for inst in group]
        if not self.instances:
            raise JaxevalError("no documents to evaluate", task=self.name, field="limit")

    # ------------------------------------------------------------------ results
    def apply_filters(self) -> None:
        for ensemble in self.filters:
            ensemble.apply(self.instances)

    def process_results(
        self, doc: dict, results: list[Any], doc_index: int | None = None
    ) -> dict[str, Any]:
        if callable(self.config.process_results):
            return self.config.process_results(doc, results)
        return scoring.OUTPUT_SCORERS[self.config.output_type](self, doc, results, doc_index)

    # The metric table's columns under lm-eval's names (read-only; `override_metric` swaps the table).
    @property
    def metrics(self) -> Mapping[str, Callable | None]:
        return self.metric_table.fns

    @property
    def metric_kwargs(self) -> Mapping[str, dict]:
        return self.metric_table.kwargs

    @property
    def aggregations(self) -> Mapping[str, Callable | None]:
        return self.metric_table.aggregations

    @property
    def higher_is_better(self) -> Mapping[str, bool | None]:
        return self.metric_table.higher_is_better

    def override_metric(self, metric_name: str) -> None:
        """`--predict_only`: every metric becomes `metric_name` (lm-eval's `override_metric`)."""
        self.metric_table = scoring.single_metric_table(metric_name)
        self.set_config(metric_list=[{"metric": metric_name}], process_results="process_results")

    def count_words(self, doc: dict) -> int:
        return scoring.count_words(self.doc_to_target(doc))

    def count_bytes(self, doc: dict) -> int:
        return scoring.count_bytes(self.doc_to_target(doc))

    @property
    def version(self) -> Any:
        return self.config.version

    def dump_config(self) -> dict[str, Any]:
        return self.config.to_dict()

    def __repr__(self) -> str:
        return (
            f"Task(name={self.name!r}, output_type={self.config.output_type!r}, "
            f"num_fewshot={self.config.num_fewshot}, num_docs={len(self.eval_docs)})"
        )
