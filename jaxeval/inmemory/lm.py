"""`InMemoryLM`: evaluate a model that lives in this process (no checkpoint), e.g. inside training.

    lm = jaxeval.InMemoryLM(spec, params, tokenizer=tok)                  # our decoder (ModelSpec)
    lm = jaxeval.InMemoryLM.from_nnx(model, tokenizer=tok, max_length=256,
                                     hidden=Model.hidden, head_weight=Model.head_weight)
    lm = jaxeval.InMemoryLM(FunctionModel(vocab_size=V, logits=fn, mask="padding"), params, ...)
    for step in range(steps):
        params = train_step(params, batch)
        if step % 500 == 0:
            lm.update_params(params, step=step)          # same shapes: nothing recompiles
            results = jaxeval.simple_evaluate(model=lm, tasks=["arc_easy", "wikitext"])

It is a `JaxLM` (same encoding rules, packing, buckets, kernels, lm-eval parity) whose weights are
the caller's arrays: parameters already on a mesh stay where they are (no host copy; a leaf with
another sharding is resharded on device), and the compiled executables belong to the object, so a
second evaluation of the same tasks with new parameters of the same shapes compiles nothing
(`lm.scorer.compile_count`, `lm.generator.compile_count`). On a multi-process mesh every process
calls `simple_evaluate` the same way; process 0 gets the results dict, the others get None.

The response cache (`use_cache`) keys answers by a fingerprint; an in-memory model has no files,
so the `name` given here plus the `step` of the last `update_params` stand for its weights (beside
the model, tokenizer and arguments, as for `JaxLM`): without a name `use_cache` is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from jaxeval.cache import fingerprint_of
from jaxeval.errors import JaxevalError
from jaxeval.inmemory.function_model import FunctionModel
from jaxeval.inmemory.point_scorer import PointScorer
from jaxeval.lm.jax_lm import JaxLM
from jaxeval.models.contract import capabilities_of
from jaxeval.models.loader import LoadedModel
from jaxeval.models.spec import ModelSpec
from jaxeval.platform.mesh import put_global, single_device_mesh
from jaxeval.shapes import pow2_at_most

# A mask-only model holds [B, T, V] float32 logits (and a temporary of that size) per batch: the
# token budget is capped so that they stay under this many bytes.
LOGITS_BYTES = 1 << 30


def _load_tokenizer(tokenizer: Any) -> Any:
    if tokenizer is None:
        raise JaxevalError(
            "an in-memory model needs its tokenizer",
            field="tokenizer",
            hint="pass tokenizer=DIR (a tokenizer directory) or a transformers tokenizer object",
        )
    if not isinstance(tokenizer, str):
        return tokenizer
    from transformers import AutoTokenizer  # heavy: imported only when a path is given

    try:
        return AutoTokenizer.from_pretrained(tokenizer)
    except (OSError, ValueError) as e:
        raise JaxevalError(
            f"the tokenizer could not be loaded: {str(e).strip().splitlines()[0]}",
            file=tokenizer,
            field="tokenizer",
            hint="give a directory holding tokenizer files, or a tokenizer object",
        ) from None


def _mesh_of(params: Any) -> Any:
    """The mesh the parameters already live on (one NamedSharding mesh, or one device)."""
    leaves = [x for x in jax.tree.leaves(params) if isinstance(x, jax.Array)]
    meshes = {x.sharding.mesh for x in leaves if isinstance(x.sharding, jax.sharding.NamedSharding)}
    if len(meshes) == 1:
        return next(iter(meshes))
    devices = {d for x in leaves for d in x.devices()}
    if not meshes and len(devices) <= 1:
        return single_device_mesh(next(iter(devices)) if devices else None)
    raise JaxevalError(
        f"the parameters live on {len(meshes)} meshes and {len(devices)} devices; cannot tell "
        "which mesh to evaluate on",
        field="mesh",
        hint="pass mesh=<the jax.sharding.Mesh of the parameters> (axes named data/fsdp/model "
        "split the batch over data and fsdp)",
    )


def _generation_config(max_length: int, tokenizer: Any, eos_token_id: Any) -> Any:
    """A transformers config carrying what generation and max_length read from a checkpoint's."""
    from transformers import PretrainedConfig  # heavy: imported only when a model is wrapped

    eos = tokenizer.eos_token_id if eos_token_id is None else eos_token_id
    return PretrainedConfig(
        max_position_embeddings=int(max_length),
        eos_token_id=eos,
        bos_token_id=tokenizer.bos_token_id,
    )


class InMemoryLM(JaxLM):
    """A `JaxLM` on a model object and its parameters in this process (module docstring).

    `model`: a `ModelSpec` (our decoder; `params` in its layout, `jaxeval.models.param_layout`) or a
    `FunctionModel` (any function; see its contract). `tokenizer`: a directory or a tokenizer
    object. `max_length`: the context length (default: the spec's max_position_embeddings; a
    FunctionModel must say). `name` / `step`: what the response cache keys answers by.
    `eos_token_id`: the id(s) generation stops on (default: the tokenizer's EOS). `progress=False`
    hides the progress bars (evaluations inside a training loop). Every other
    keyword is `JaxLM`'s (`batch_size`, `token_budget`, `gen_batch_size`, `seed`, ...).
    """

    def __init__(
        self,
        model: Any,
        params: Any,
        *,
        tokenizer: Any,
        max_length: int | None = None,
        mesh: Any = None,
        name: str | None = None,
        step: int | None = None,
        eos_token_id: int | list[int] | None = None,
        hf_config: Any = None,
        progress: bool = True,
        **kwargs: Any,
    ):
        if not isinstance(model, (ModelSpec, FunctionModel)):
            hint = "wrap functions in jaxeval.inmemory.FunctionModel"
            if type(model).__module__.startswith("flax"):
                hint = "use InMemoryLM.from_nnx(module, ...) or InMemoryLM.from_linen(...)"
            raise JaxevalError(
                f"model of type {type(model).__name__} is neither a ModelSpec nor a FunctionModel",
                field="model",
                hint=hint,
            )
        if "pretrained" in kwargs:
            raise JaxevalError(
                "an in-memory model takes (model, params), not pretrained=",
                field="pretrained",
                hint="use JaxLM(pretrained=DIR) for a checkpoint",
            )
        tok = _load_tokenizer(tokenizer)
        if max_length is None and capabilities_of(model).layout:
            max_length = model.max_position_embeddings
        if max_length is None and hf_config is None:
            raise JaxevalError(
                "a FunctionModel does not know its context length",
                field="max_length",
                hint="pass max_length=<the longest sequence the model takes>",
            )
        if isinstance(model, FunctionModel) and not model.packs:
            for key in ("packing", "shared_context"):
                if kwargs.get(key):
                    raise JaxevalError(
                        f"{key}=True needs the segment mask; a mask='padding' model scores one "
                        "request per right-padded row",
                        field=key,
                        hint="leave it unset, or give the model mask='segments'",
                    )
                kwargs[key] = False
        if isinstance(model, FunctionModel) and model.kind == "logits":
            kwargs.setdefault("token_budget", self._logits_budget(model.vocab_size, max_length))
        mesh = _mesh_of(params) if mesh is None else mesh
        config = hf_config or _generation_config(max_length, tok, eos_token_id)
        loaded = LoadedModel(spec=model, params=params, hf_config=config, path="", mesh=mesh)
        super().__init__(
            pretrained=loaded, tokenizer=tok, max_length=max_length, mesh=mesh, **kwargs
        )
        if isinstance(model, FunctionModel):
            self.scorer = PointScorer(
                model=model,
                params=self.scorer.params,
                mesh=self.mesh,
                runtime=self.loaded.runtime,
                buckets=self.buckets,
                vocab_chunk=kwargs.get("vocab_chunk"),
            )
        self.name = name
        self.step = step
        self.progress = bool(progress)
        self._nnx_graphdef: Any = None  # set by from_nnx: update_params then takes the module

    @staticmethod
    def _logits_budget(vocab: int, max_length: int | None) -> int:
        budget = max(1, LOGITS_BYTES // (8 * vocab))
        budget = pow2_at_most(budget)
        return max(budget, int(max_length or 1))

    # ---- Flax constructors ----------------------------------------------------------------
    @classmethod
    def _from_bound(
        cls,
        bind: Callable[[Callable], Callable],
        params: Any,
        model_type: str,
        *,
        tokenizer: Any,
        max_length: int,
        hidden: Callable | None = None,
        head_weight: Callable | None = None,
        head: Callable | None = None,
        logits: Callable | None = None,
        mask: str = "segments",
        vocab_size: int | None = None,
        **kwargs: Any,
    ) -> InMemoryLM:
        """A `FunctionModel` over the module's functions, each turned into a function of the
        parameters by `bind(fn)`; the rest of `kwargs` go to `InMemoryLM`."""
        fns = {"hidden": hidden, "head_weight": head_weight, "head": head, "logits": logits}
        bound = {name: None if fn is None else bind(fn) for name, fn in fns.items()}
        model = FunctionModel(
            vocab_size=_vocab_size(vocab_size, bound["head_weight"], params),
            mask=mask,
            model_type=model_type,
            **bound,
        )
        return cls(model, params, tokenizer=tokenizer, max_length=max_length, **kwargs)

    @classmethod
    def from_nnx(cls, module: Any, **kwargs: Any) -> InMemoryLM:
        """A Flax nnx module: the functions take the module first, e.g.
        `hidden(module, tokens, positions, segment_ids, parent_ids)`, `head_weight(module)`,
        `logits(module, tokens, positions, attention_mask)` (unbound methods work:
        `hidden=MyModel.hidden`). The module is split once (`nnx.split`); its state is the
        parameters, and `update_params(module)` takes the trained module (or its state).

        Keywords: `tokenizer`, `max_length` (required), the functions `hidden`, `head_weight`,
        `head`, `logits`, then `mask` ("segments" or "padding"), `vocab_size`, and any
        `InMemoryLM` argument."""
        from flax import nnx  # imported only for Flax users

        if not isinstance(module, nnx.Module):
            raise JaxevalError(
                f"from_nnx needs a flax.nnx.Module, got {type(module).__name__}", field="module"
            )
        graphdef, state = nnx.split(module)

        def bind(fn: Callable) -> Callable:
            return lambda params, *args: fn(nnx.merge(graphdef, params), *args)

        lm = cls._from_bound(bind, state, type(module).__name__, **kwargs)
        lm._nnx_graphdef = graphdef
        return lm

    @classmethod
    def from_linen(cls, module: Any, variables: Any, **kwargs: Any) -> InMemoryLM:
        """A Flax linen module and its variables: each function takes the bound module first and
        runs through `module.apply(variables, ..., method=fn)`, e.g. `logits=MyModel.__call__`;
        `update_params(variables)` takes new variables. Keywords as `from_nnx`."""

        def bind(fn: Callable) -> Callable:
            return lambda params, *args: module.apply(params, *args, method=fn)

        return cls._from_bound(bind, variables, type(module).__name__, **kwargs)

    # ---- evaluation during training --------------------------------------------------------
    def update_params(self, params: Any, *, step: int | None = None) -> None:
        """New weights of the same tree, shapes and dtypes; the compiled executables are kept.

        A leaf already on the right sharding is used as is (no copy); a leaf on another sharding
        or device is moved there on device (`jax.device_put`), never through the host.
        """
        params = self._unwrap(params)
        old = self.scorer.params
        old_leaves, old_tree = jax.tree_util.tree_flatten_with_path(old)
        new_leaves, new_tree = jax.tree_util.tree_flatten_with_path(params)
        if old_tree != new_tree:
            raise JaxevalError(
                "the new parameters' tree differs from the evaluated model's",
                field="params",
                hint="pass parameters of the same model (same structure); for another model, "
                "build another InMemoryLM",
            )
        placed = []
        for (path, o), (_, n) in zip(old_leaves, new_leaves):
            if tuple(n.shape) != tuple(o.shape) or n.dtype != o.dtype:
                raise JaxevalError(
                    f"parameter {jax.tree_util.keystr(path)} is {n.dtype}{list(n.shape)}, the "
                    f"evaluated model's is {o.dtype}{list(o.shape)}",
                    field="params",
                    hint="shapes and dtypes must stay fixed (the executables are compiled for "
                    "them); build another InMemoryLM for a different model",
                )
            same = isinstance(n, jax.Array) and n.sharding.is_equivalent_to(o.sharding, n.ndim)
            placed.append(n if same else _move(n, o.sharding))
        params = jax.tree.unflatten(old_tree, placed)
        self.scorer.params = params
        if self.generator is not None:
            self.generator.params = params
        self.loaded = dataclasses.replace(self.loaded, params=params)
        if step is not None:
            self.step = step

    def _unwrap(self, params: Any) -> Any:
        if self._nnx_graphdef is None:
            return params
        from flax import nnx  # imported only for Flax users

        if isinstance(params, nnx.Module):
            graphdef, params = nnx.split(params)
            if graphdef != self._nnx_graphdef:
                raise JaxevalError(
                    "the module's structure differs from the one this InMemoryLM was built on",
                    field="params",
                    hint="pass the same (trained) module, or build another InMemoryLM",
                )
        return params

    # ---- JaxLM overrides ------------------------------------------------------------------
    def loglikelihood(
        self,
        requests: Any,
        disable_tqdm: bool = False,
        *,
        known: dict[int, tuple[float, bool]] | None = None,
        on_answers: Callable[[list[int], list[tuple[float, bool]]], None] | None = None,
    ) -> list:
        """`JaxLM.loglikelihood`, its bar shown only with `progress`."""
        hide = disable_tqdm or not self.progress
        return super().loglikelihood(requests, hide, known=known, on_answers=on_answers)

    def loglikelihood_rolling(
        self,
        requests: Any,
        disable_tqdm: bool = False,
        *,
        known: dict[int, float] | None = None,
        on_answers: Callable[[list[int], list[float]], None] | None = None,
    ) -> list:
        """`JaxLM.loglikelihood_rolling`, its bar shown only with `progress`."""
        hide = disable_tqdm or not self.progress
        return super().loglikelihood_rolling(requests, hide, known=known, on_answers=on_answers)

    def generate_until(
        self,
        requests: Any,
        disable_tqdm: bool = False,
        *,
        known: dict[int, str] | None = None,
        on_answers: Callable[[list[int], list[str]], None] | None = None,
    ) -> list[str]:
        """lm-eval's generate_until on this adapter's one `Generator` (`JaxLM.generation`)."""
        hide = disable_tqdm or not self.progress
        return super().generate_until(requests, hide, known=known, on_answers=on_answers)

    def fingerprint(self) -> str:
        """The response cache's key: `name` and `step` stand for the weights (there are no files to
        identify); the model, tokenizer and answer-changing arguments count as for `JaxLM`."""
        if self.name is None:
            raise JaxevalError(
                "the response cache (use_cache) needs a name for an in-memory model: its answers "
                "would otherwise be served to another model's weights",
                field="use_cache",
                hint="build it with InMemoryLM(..., name='my-run') and pass step= to "
                "update_params, or leave use_cache unset",
            )
        return fingerprint_of(**self.fingerprint_parts(["in-memory", self.name, self.step]))

    def model_info(self) -> dict[str, Any]:
        info = super().model_info()
        spec = self.loaded.spec
        info["in_memory"] = {
            "name": self.name,
            "step": self.step,
            "generation": "kv_cache" if capabilities_of(spec).kv_cache else "recompute",
            "packing": self.packing,
        }
        if self.generator is not None:
            info["generation_compile_count"] = self.generator.compile_count
        return info


def _vocab_size(given: int | None, head_weight: Callable | None, params: Any) -> int:
    if given is not None:
        return int(given)
    if head_weight is None:
        raise JaxevalError(
            "the vocabulary size is unknown without head_weight",
            field="vocab_size",
            hint="pass vocab_size=V",
        )
    return int(jax.eval_shape(head_weight, params).shape[0])


def _move(x: Any, sharding: Any) -> jax.Array:
    """`x` onto `sharding`: on device for a jax.Array, through `put_global` for host data."""
    if isinstance(x, jax.Array):
        return jax.device_put(x, sharding)

    return put_global(x, sharding)
