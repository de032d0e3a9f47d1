"""lm-eval's Python `class:` tasks, driven through jaxeval's evaluator.

A catalogue YAML such as `squad_completion.yaml` (`class: !function task.SQUADCompletion`) puts its
prompts and scoring in the methods of an lm-eval `Task` subclass. jaxeval builds that object (as
lm-eval's factory does) and wraps it in `LmEvalTask`, which offers what the evaluator uses from a
`jaxeval.api.task.Task`; the lm-eval object makes the requests, filters and per-document scores:

    build_all_requests   lm-eval builds its Instances; jaxeval copies them into its own
                         (request type, doc, arguments, idx, (task, doc_id, repeats))
    model answers        land in jaxeval's Instances (`resps`)
    apply_filters        copies `resps` back, runs lm-eval's filters, copies `filtered_resps` out
    process_results,     lm-eval's own methods
    aggregations, ...

With `--data_dir` the class's hub dataset (`DATASET_PATH` / `DATASET_NAME`, or the YAML's
`dataset_path`) is read from local files in the hub layout instead: the object is built from a
subclass whose `download` loads those files. A class that is not an lm-eval `Task` is an error
that names it.
"""

from __future__ import annotations

import inspect
from typing import Any

from jaxeval.api.data import local_format
from jaxeval.api.instance import Instance
from jaxeval.errors import JaxevalError

SPLITS = ("train", "validation", "test")


def lm_eval_task_base() -> type:
    from lm_eval.api.task import Task as LmTask

    return LmTask


def check_task_class(cls: Any, *, task: str, source: str | None) -> type:
    """The class, if it follows lm-eval's Task interface; else an error naming it."""
    name = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls)}"
    if not (inspect.isclass(cls) and issubclass(cls, lm_eval_task_base())):
        raise JaxevalError(
            f"`class:` names {name}, which is not an lm-eval Task subclass; jaxeval can only drive "
            "classes that follow lm-eval's Task interface",
            task=task,
            file=source,
            field="class",
        )
    return cls


def dataset_location(cls: type, cfg: dict) -> tuple[str | None, str | None]:
    """(dataset_path, dataset_name) of a class task: the YAML's keys, else the class attributes."""
    path = cfg.get("dataset_path") or getattr(cls, "DATASET_PATH", None)
    name = cfg.get("dataset_name") or getattr(cls, "DATASET_NAME", None)
    return path, name


def with_local_data(cls: type, files: dict[str, str]) -> type:
    """A subclass of `cls` whose `download` reads `files` ({split: path}) instead of the hub."""

    def download(self: Any, *args: Any, **kwargs: Any) -> None:
        import datasets

        fmt = local_format(next(iter(files.values())))
        self.dataset = datasets.load_dataset(fmt, data_files=dict(files))

    return type(
        cls.__name__,
        (cls,),
        {"download": download, "__module__": cls.__module__, "__qualname__": cls.__qualname__},
    )


def make_task_object(cls: type, cfg: dict) -> Any:
    """lm-eval's factory: `cls(config=cfg)` when the constructor takes a config, else `cls()`."""
    init = getattr(cls, "__init__", None)
    takes_config = bool(init and "config" in inspect.signature(init).parameters)
    obj = cls(config=cfg) if takes_config else cls()
    if hasattr(obj, "config") and hasattr(obj.config, "task"):
        obj.config.task = cfg["task"]
    return obj


class LmEvalTask:
    """An lm-eval Task object with the surface jaxeval's evaluator uses."""

    def __init__(self, obj: Any, *, name: str):
        self.obj = obj
        self.name = name
        self.instances: list[Instance] = []
        self._theirs: list[Any] = []

    @property
    def config(self) -> Any:
        return self.obj.config

    @property
    def eval_docs(self) -> Any:
        return self.obj.eval_docs

    @property
    def version(self) -> Any:
        meta = getattr(self.obj.config, "metadata", None) or {}
        return meta.get("version", getattr(self.obj, "VERSION", None))

    @property
    def aggregations(self) -> dict:
        return self.obj.aggregation()

    @property
    def higher_is_better(self) -> dict:
        return self.obj.higher_is_better()

    def set_config(self, **changes: Any) -> None:
        for key, value in changes.items():
            self.obj.set_config(key=key, value=value)

    def override_metric(self, metric_name: str) -> None:
        """`--predict_only`: lm-eval's own override (every metric becomes `metric_name`)."""
        self.obj.override_metric(metric_name)

    def set_fewshot_seed(self, seed: int | None) -> None:
        self.obj.set_fewshot_seed(seed=seed)

    def fewshot_context(self, doc: Any, num_fewshot: int, **kwargs: Any) -> Any:
        return self.obj.fewshot_context(doc, num_fewshot)

    def doc_to_target(self, doc: Any) -> Any:
        return self.obj.doc_to_target(doc)

    def doc_iterator(self, **options: Any) -> list[tuple[int, Any]]:
        """lm-eval's own (limit, samples, rank, world_size: the evaluator's keywords)."""
        return list(self.obj.doc_iterator(**options))

    def build_all_requests(self, *, cache_requests: Any = None, **options: Any) -> None:
        """lm-eval builds the requests with the evaluator's keywords (limit, samples, rank,
        world_size, system_instruction, apply_chat_template, fewshot_as_multiturn, chat_template,
        tokenizer_name); its request cache is not used. jaxeval copies them."""
        self.obj.build_all_requests(**options, cache_requests=False, rewrite_requests_cache=False)
        self._theirs = list(self.obj.instances)
        self.instances = [
            Instance(t.request_type, t.doc, t.arguments, t.idx, (self.name, t.doc_id, t.repeats))
            for t in self._theirs
        ]
        if not self.instances:
            raise JaxevalError("no documents to evaluate", task=self.name, field="limit")

    def apply_filters(self) -> None:
        for ours, theirs in zip(self.instances, self._theirs):
            theirs.resps = list(ours.resps)
        self.obj.apply_filters()
        for ours, theirs in zip(self.instances, self._theirs):
            ours.filtered_resps = dict(theirs.filtered_resps)

    def process_results(self, doc: Any, results: list[Any], doc_index: int | None = None) -> dict:
        return self.obj.process_results(doc, results)

    def dump_config(self) -> dict:
        return self.obj.dump_config()

    def __repr__(self) -> str:
        return f"LmEvalTask(name={self.name!r}, class={type(self.obj).__qualname__})"
