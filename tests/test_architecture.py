"""The package's shape: imports down the layers, no cycles, lazy imports only for start-up, one home
per rule.

The import graph counts every `import` of a jaxeval module, inside functions too (an import moved
into a function to dodge a cycle is still a cycle), except under `if TYPE_CHECKING:`. Importing
`jaxeval.a.b` also runs `jaxeval/a/__init__.py`, so it adds an edge to `jaxeval.a` as well (unless
the importer lives inside `jaxeval.a`). `tasks/` installs as `jaxeval.tasks`.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = {"jaxeval": REPO / "jaxeval"}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for prefix, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([prefix, *parts])] = path
    return out


def _imports(name: str, path: pathlib.Path, modules: dict) -> list[tuple[int, str, bool]]:
    """(line, imported jaxeval module, inside a function) for every import outside TYPE_CHECKING."""
    tree = ast.parse(path.read_text())
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        else:
            continue
        in_function = type_checking = False
        up = node
        while up in parents:
            up = parents[up]
            in_function |= isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef))
            type_checking |= isinstance(up, ast.If) and "TYPE_CHECKING" in ast.unparse(up.test)
        if type_checking:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.append((node.lineno, target, in_function))
    return out


def import_graph(modules: dict[str, pathlib.Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for _, target, _ in _imports(name, path, modules):
            edges[name].add(target)
            package = target.rpartition(".")[0]
            while package in modules:
                if not (name == package or name.startswith(package + ".")):
                    edges[name].add(package)
                package = package.rpartition(".")[0]
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    modules = _modules()
    assert len(modules) > 80
    found = cycles(import_graph(modules))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


# docs/architecture.md's Layers table. Each layer: its modules, and what they may import besides
# their own layer (layers by name, or modules). `jaxeval.api.*` is the package and everything in
# it; a name without `.*` is that one module. Modules the table does not list are placed by use:
# the package root (the public API, resolved lazily), and the CLI's and demo's helpers.
FOUNDATIONS = (
    "jaxeval.platform.*",
    "jaxeval.shapes",
    "jaxeval.paths",
    "jaxeval.registry",
    "jaxeval.errors",
)
BELOW_EVALUATOR = (
    "response cache",
    "model adapter",
    "kernels",
    "models",
    "device kernels",
    "task engine",
    "metrics, filters",
    "foundations",
)
LAYERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "entry points": (
        ("jaxeval", "jaxeval.__main__", "jaxeval.cli.*", "jaxeval.demo.*", "jaxeval.plan.*"),
        ("evaluator", "reports, trackers", *BELOW_EVALUATOR),
    ),
    # Results files read back (`jaxeval report`) and results sent to W&B, the Hub, a training
    # loop's logger: they read the results schema and file names, never run a model.
    "reports, trackers": (
        ("jaxeval.report.*", "jaxeval.trackers.*"),
        ("jaxeval.results.files", "jaxeval.lm.args", "foundations"),
    ),
    "evaluator": (
        ("jaxeval.evaluator", "jaxeval.preflight", "jaxeval.results.*", "jaxeval.run_info")
        + ("jaxeval.run_config",),
        BELOW_EVALUATOR,
    ),
    "response cache": (
        ("jaxeval.cache",),
        ("jaxeval.platform.distributed", "jaxeval.api.instance"),
    ),
    "model adapter": (
        ("jaxeval.lm.*", "jaxeval.inmemory.*"),
        ("kernels", "models", "response cache", "foundations", "jaxeval.api.instance"),
    ),
    "kernels": (
        ("jaxeval.kernels.*",),
        ("jaxeval.models.contract", "jaxeval.models.runtime", "jaxeval.platform.mesh")
        + ("jaxeval.shapes",),
    ),
    "models": (("jaxeval.models.*",), ("device kernels", "foundations")),
    # One operation on one platform (attention's Pallas, cuDNN and C++ kernels, and the mask rule
    # they share with the reference): below the models, whose backends call them.
    "device kernels": (("jaxeval.ops.*",), ("foundations",)),
    "task engine": (("jaxeval.api.*",), ("metrics, filters", "foundations")),
    # paths: where the bootstrap's C++ kernel is built (`jaxeval.metrics.bootstrap_kernel`).
    "metrics, filters": (
        ("jaxeval.metrics.*", "jaxeval.filters.*"),
        ("jaxeval.registry", "jaxeval.paths"),
    ),
    "foundations": (FOUNDATIONS, ()),
}
# Any layer may import errors (`JaxevalError` is raised everywhere).
ANYWHERE = ("jaxeval.errors",)


def _matches(module: str, pattern: str) -> bool:
    if pattern.endswith(".*"):
        return module == pattern[:-2] or module.startswith(pattern[:-1])
    return module == pattern


def layer_of(module: str) -> list[str]:
    """The layers whose modules include `module` (exactly one, for a module that is placed)."""
    return [layer for layer, (mine, _) in LAYERS.items() if any(_matches(module, p) for p in mine)]


def may_import(layer: str, module: str) -> bool:
    mine, allowed = LAYERS[layer]
    for entry in (*mine, *allowed, *ANYWHERE):
        patterns = LAYERS[entry][0] if entry in LAYERS else (entry,)
        if any(_matches(module, p) for p in patterns):
            return True
    return False


def layer_violations(imports: dict[str, list[tuple[str, int, str]]]) -> list[str]:
    """`where: importer (layer) imports target (layer)` for each import that points up or sideways,
    from `{importer: [(file, line, target), ...]}`."""
    out = []
    for name, edges in sorted(imports.items()):
        (layer,) = layer_of(name)
        for where, line, target in edges:
            if not may_import(layer, target):
                theirs = ", ".join(layer_of(target)) or "no layer"
                message = f"{where}:{line}: {name} ({layer}) imports {target} ({theirs})"
                if message not in out:  # `from a import x, y` names module a twice
                    out.append(message)
    return out


def test_layer_rule_flags_an_upward_import():
    fake = {
        "jaxeval.api.fake": [
            ("api/fake.py", 3, "jaxeval.metrics"),
            ("api/fake.py", 9, "jaxeval.lm.x"),
        ],
        "jaxeval.kernels.fake": [
            ("jaxeval/kernels/fake.py", 1, "jaxeval.models.contract"),
            ("jaxeval/kernels/fake.py", 2, "jaxeval.models.decoder"),
        ],
        "jaxeval.platform.mesh": [("platform/mesh.py", 5, "jaxeval.errors")],
    }
    assert layer_violations(fake) == [
        "api/fake.py:9: jaxeval.api.fake (task engine) imports jaxeval.lm.x (model adapter)",
        "jaxeval/kernels/fake.py:2: jaxeval.kernels.fake (kernels) imports jaxeval.models.decoder (models)",
    ]


def test_every_module_has_one_layer():
    misplaced = {m: layer_of(m) for m in _modules() if len(layer_of(m)) != 1}
    assert not misplaced, (
        f"place these in LAYERS and docs/architecture.md's Layers table: {misplaced}"
    )


def test_imports_point_down_the_layers():
    """Imports follow docs/architecture.md's Layers table: the task engine, metrics and filters
    never import the model side (lm, inmemory, kernels, models), kernels import only the model
    contract, mesh and shapes, models never import lm, api or the evaluator, foundations import
    only each other. Imports inside functions count; the package `__init__` an import also runs
    does not (the cycle test sees those), nor do imports under `if TYPE_CHECKING:`."""
    modules = _modules()
    imports = {
        name: [
            (str(path.relative_to(REPO)), line, target)
            for line, target, _ in _imports(name, path, modules)
        ]
        for name, path in modules.items()
        if len(layer_of(name)) == 1
    }
    bad = layer_violations(imports)
    assert not bad, "imports against docs/architecture.md's layers:\n" + "\n".join(bad)


def test_imports_inside_functions_say_why():
    """A jaxeval import inside a function exists only to keep start-up light, and says so: a comment
    on its line or on the line just above its block of imports."""
    modules = _modules()
    bare = []
    for name, path in modules.items():
        lines = path.read_text().splitlines()
        for line, target, in_function in _imports(name, path, modules):
            if not in_function:
                continue
            above = line - 2
            while above >= 0 and re.match(r"\s*(from|import) ", lines[above]):
                above -= 1
            if "#" not in lines[line - 1] and not lines[above].strip().startswith("#"):
                bare.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert not bare, "\n".join(bare)


@pytest.mark.parametrize(
    "pattern, home",
    [
        # the batch axes, and batch constraints inside kernels
        (r"""\(\s*["']data["'],\s*["']fsdp["']\s*\)""", "jaxeval/platform/mesh.py"),
        (r"with_sharding_constraint", "jaxeval/platform/mesh.py"),
        (r"""["']\.cache["']|["']XDG_CACHE_HOME["']""", "jaxeval/paths.py"),  # the cache root
    ],
)
def test_one_home_per_rule(pattern, home):
    """The batch sharding rule lives in `jaxeval.platform.mesh` and the cache root in
    `jaxeval.paths`; everything else imports them."""
    where = []
    for path in _modules().values():
        text = path.read_text()
        if re.search(pattern, text):
            where.append(str(path.relative_to(REPO)))
    assert where == [home]


def test_public_names_are_not_reused_across_modules():
    """A public function or class name means one thing in jaxeval/ (entry points named
    `main`, and lm-eval's own registry names, excepted)."""
    allowed = {
        "main",
        "bypass",  # lm-eval names a metric and an aggregation alike
        "f1",
        "normalize_answer",  # compat.py stands in for transformers' squad_metrics under its names
    }
    seen: dict[str, list[str]] = {}
    for path in _modules().values():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                seen.setdefault(node.name, []).append(str(path.relative_to(REPO)))
    repeated = {n: p for n, p in seen.items() if len(p) > 1 and n not in allowed}
    assert not repeated, repeated


def test_model_spec_meets_the_kernels_contract():
    """`ModelSpec` implements `DecoderModel`, the one type the kernels take for `model`; every
    kernel takes the `Runtime` beside it."""
    import importlib
    import inspect

    import transformers

    from jaxeval.models import spec_from_config
    from jaxeval.models.contract import DecoderModel
    from jaxeval.models.runtime import Runtime

    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    spec = spec_from_config(config)
    assert isinstance(spec, DecoderModel)
    hash(spec)
    for name in ("score", "generate", "decode_step"):
        fn = getattr(importlib.import_module(f"jaxeval.kernels.{name}"), name)
        assert inspect.signature(fn).parameters["model"].annotation in (
            "DecoderModel",
            DecoderModel,
        )
    for name in ("score", "generate", "decode_step"):
        fn = getattr(importlib.import_module(f"jaxeval.kernels.{name}"), name)
        assert inspect.signature(fn).parameters["runtime"].annotation in ("Runtime", Runtime)


# ---- the compile boundary, private members, mesh axes -----------------------------------------

COMPILE_BOUNDARY = "jaxeval/lm/executables.py"


def compile_calls(source: str) -> list[int]:
    """Lines that lower or compile a jitted function: `.lower(args...)` (a string's `.lower()`
    takes none, numpy's `np.char.lower` is not one) and `.compile(...)` on anything but the
    `re` module."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        attr, receiver = node.func.attr, node.func.value
        if attr == "lower" and (node.args or node.keywords) and ast.unparse(receiver) != "np.char":
            out.append(node.lineno)
        if attr == "compile" and not (isinstance(receiver, ast.Name) and receiver.id == "re"):
            out.append(node.lineno)
    return out


def test_compile_calls_are_found():
    code = (
        "import re\nx = re.compile('a')\ny = 'A'.lower()\nf.lower(a).compile()\nnp.char.lower(t)\n"
    )
    assert compile_calls(code) == [4, 4]


def test_only_the_compile_boundary_lowers_and_compiles():
    """`jax.jit(...).lower(...).compile()` happens in `Executables` alone: every owner (scorer,
    generator, continuous engine, planner) hands it `Job`s."""
    found = {
        str(path.relative_to(REPO)): lines
        for path in _modules().values()
        if (lines := compile_calls(path.read_text()))
    }
    assert list(found) == [COMPILE_BOUNDARY], found


# namedtuple's own API (underscored so as not to clash with field names), and what other
# packages leave private that we must call: transformers' availability probe and decoder, the
# standard library's documented `os._exit` and the exit handlers the command runs before it
PUBLIC_UNDERSCORED = {"_replace", "_asdict", "_make", "_fields"}
THIRD_PARTY_PRIVATE = {
    "import_utils._is_package_available",
    "TokenizersBackend._decode",
    "os._exit",
    "atexit._run_exitfuncs",
}


def private_calls(source: str) -> list[str]:
    """`receiver._method(...)` calls on anything but `self`, `cls` or `super()`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        attr, receiver = node.func.attr, node.func.value
        if not attr.startswith("_") or attr.startswith("__") or attr in PUBLIC_UNDERSCORED:
            continue
        if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
            continue
        if isinstance(receiver, ast.Call) and ast.unparse(receiver.func) == "super":
            continue
        text = ast.unparse(node.func)
        if text not in THIRD_PARTY_PRIVATE:
            out.append(f"{node.lineno}: {text}")
    return out


def test_private_calls_are_found():
    code = "self._a()\nsuper()._b()\nx._replace(a=1)\nengine._decode_job()\nm.f._g(1)\n"
    assert private_calls(code) == ["4: engine._decode_job", "5: m.f._g"]


def test_no_module_calls_another_objects_private_methods():
    """Owners publish what others may call (`Scorer.jobs`, `ContinuousEngine.decode_job`, ...);
    nothing reaches into another object's underscore methods."""
    found = {
        str(path.relative_to(REPO)): calls
        for path in _modules().values()
        if (calls := private_calls(path.read_text()))
    }
    assert not found, found


MESH_AXIS_HOMES = ("jaxeval/platform/mesh.py", "jaxeval/models/sharding.py")


def mesh_axis_literals(source: str) -> list[int]:
    """Lines naming a mesh axis by its string: `x.shape["model"]`, `x.shape.get("fsdp", 1)`,
    `PartitionSpec("data", ...)` / `P(...)`, `axis_name="model"`."""
    axes = {"data", "fsdp", "model"}

    def named(node):
        return isinstance(node, ast.Constant) and node.value in axes

    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
            if node.value.attr == "shape" and named(node.slice):
                out.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            if node.func.attr == "get" and isinstance(receiver, ast.Attribute):
                if receiver.attr == "shape" and node.args and named(node.args[0]):
                    out.append(node.lineno)
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("P", "PartitionSpec"):
            if any(named(a) for a in ast.walk(node) if a is not node.func):
                out.append(node.lineno)
        if (
            isinstance(node, ast.keyword)
            and node.arg in ("axis_name", "axis")
            and named(node.value)
        ):
            out.append(node.value.lineno)
    return sorted(set(out))


def test_mesh_axis_literals_are_found():
    code = 'a = m.shape["model"]\nb = m.shape.get("fsdp", 1)\nc = P(None, "data")\nd = x["model"]\n'
    assert mesh_axis_literals(code) == [1, 2, 3]


def test_mesh_axes_are_named_only_by_the_sharding_and_mesh_modules():
    """Which mesh axis splits what is read from the rule table (`models.sharding`) and the batch
    rule (`platform.mesh`); no other module names an axis."""
    found = {
        str(path.relative_to(REPO)): lines
        for path in _modules().values()
        if str(path.relative_to(REPO)) not in MESH_AXIS_HOMES
        and (lines := mesh_axis_literals(path.read_text()))
    }
    assert not found, found


def test_no_module_is_over_600_lines():
    long = {
        str(path.relative_to(REPO)): n
        for path in _modules().values()
        if (n := len(path.read_text().splitlines())) > 600
    }
    assert not long, long


# the top level of jaxeval/: cross-cutting modules only; everything else lives in a package
TOP_LEVEL = {
    "__init__",
    "__main__",
    "errors",
    "paths",
    "registry",
    "shapes",
    "evaluator",
    "preflight",
    "run_info",
    "run_config",
    "cache",
}


def test_the_top_level_holds_cross_cutting_modules_only():
    modules = {p.stem for p in (REPO / "jaxeval").glob("*.py")}
    assert modules <= TOP_LEVEL, sorted(modules - TOP_LEVEL)


def any_aliases(source: str) -> list[str]:
    """Module-level names bound to `Any` as a type (`XSpec = Any`, `XSpec: TypeAlias = Any`,
    `type XSpec = Any`): a stand-in for a real type, usually to dodge an import cycle."""
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        elif isinstance(node, getattr(ast, "TypeAlias", ())):  # `type X = ...`, Python 3.12
            target, value = node.name, node.value
        else:
            continue
        if isinstance(target, ast.Name) and ast.unparse(value) in ("Any", "typing.Any"):
            found.append(target.id)
    return found


def test_any_aliases_are_found():
    source = "from typing import Any\nMoESpec = Any\nT: TypeAlias = typing.Any\nx: Any = 1\n"
    assert any_aliases(source) == ["MoESpec", "T"]
    assert any_aliases("MoESpec = dict[str, Any]\ndef f(a: Any = None): ...\n") == []


def test_no_type_is_an_alias_of_any():
    """A spec (or any type) is its real class, imported where it is used; the import graph then
    shows any cycle the alias hid."""
    found = {
        str(path.relative_to(REPO)): names
        for path in _modules().values()
        if (names := any_aliases(path.read_text()))
    }
    assert not found, found


def all_imports(sources: dict[str, str]) -> dict[str, set[str]]:
    """The modules each module of `sources` (module name -> source text) imports, those under
    `if TYPE_CHECKING:` too (a cycle an annotation needs is a cycle of the design), named as
    `import_graph` names them."""
    edges: dict[str, set[str]] = {m: set() for m in sources}
    for name, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                base = node.module
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base
                    for a in node.names
                ]
            else:
                continue
            for target in targets:
                while target and target not in sources:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges[name].add(target)
    return edges


def test_type_checking_cycles_are_found():
    """The families' old pair: dense imports experts for an annotation (which `import_graph`
    skips), experts imports dense."""
    sources = {
        "pkg.dense": "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.experts import Experts\n",
        "pkg.experts": "from pkg.dense import Decoder\n",
        "pkg.table": "import pkg.dense\n",
    }
    assert cycles(all_imports(sources)) == [["pkg.dense", "pkg.experts"]]
    assert cycles(all_imports({**sources, "pkg.dense": "import typing\n"})) == []


def test_no_import_cycles_even_for_annotations():
    """No import cycle, counting the imports under `if TYPE_CHECKING:` too (the families' dense
    and MoE builders once imported each other, one of them for `Decoder.experts`' annotation)."""
    found = cycles(all_imports({m: p.read_text() for m, p in _modules().items()}))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


# the cache side of the attention seam: the backends, the reference, the slot and token splits,
# the device kernels and their callers take the KV cache as one `KVCache`
CACHE_SIDE = (
    "jaxeval/models/attention",
    "jaxeval/ops/attention",
    "jaxeval/models/decoder.py",
    "jaxeval/kernels",
)
CACHE_PIECES = {"k_cache", "v_cache", "slot_valid", "slot_positions"}


def cache_piece_parameters(source: str) -> list[str]:
    """`line: function(parameter)` for every function, method, nested function and lambda that
    takes a piece of the KV cache (`CACHE_PIECES`) as a parameter of its own."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                if arg.arg in CACHE_PIECES:
                    out.append(f"{node.lineno}: {getattr(node, 'name', 'lambda')}({arg.arg})")
    return out


def test_cache_piece_parameters_are_found():
    code = (
        "def cache_state(q, k_cache, v_cache, layer, slot_valid, slot_positions, index): ...\n"
        "class B:\n"
        "    def write_slots(self, cache, k, v, index, *, mesh=None): ...\n"
        "f = lambda q, *, slot_valid: q\n"
    )
    assert cache_piece_parameters(code) == [
        "1: cache_state(k_cache)",
        "1: cache_state(v_cache)",
        "1: cache_state(slot_valid)",
        "1: cache_state(slot_positions)",
        "4: lambda(slot_valid)",
    ]


def test_no_backend_takes_the_cache_in_pieces():
    """Every attention backend, the reference, the splits and the device kernels take the KV
    cache as one `KVCache` (k, v and the slots' bookkeeping together), never as loose arrays."""
    found = {
        str(path.relative_to(REPO)): names
        for path in _modules().values()
        if str(path.relative_to(REPO)).startswith(CACHE_SIDE)
        and (names := cache_piece_parameters(path.read_text()))
    }
    assert not found, found


# the mesh's one home: the `Runtime`; the backends are handed it per call. The per-call splits
# (`sequence.Split`, `slots.SlotSplit`) are values the runtime's mesh gives, never held.
MESH_HOLDERS = {"Runtime", "Split", "SlotSplit"}
BACKEND_HOMES = ("jaxeval/models/runtime.py", "jaxeval/models/attention", "jaxeval/models/experts")


def mesh_fields(source: str) -> list[str]:
    """The classes of `source` with a field (an annotated name in the class body) called `mesh`."""
    return [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
        and any(
            isinstance(item, ast.AnnAssign) and ast.unparse(item.target) == "mesh"
            for item in node.body
        )
    ]


def test_mesh_fields_are_found():
    code = (
        "@dataclass\nclass Runtime:\n    mesh: Mesh | None = None\n"
        "@dataclass\nclass TpuAttention:\n    name: str = 'tpu'\n    mesh: Any = None\n"
        "class XlaAttention:\n    def f(self, mesh=None):\n        mesh: int = 1\n"
    )
    assert mesh_fields(code) == ["Runtime", "TpuAttention"]


def test_only_the_runtime_holds_the_mesh():
    """No backend (attention or experts) keeps a mesh of its own beside the `Runtime`'s."""
    found = {
        str(path.relative_to(REPO)): names
        for path in _modules().values()
        if str(path.relative_to(REPO)).startswith(BACKEND_HOMES)
        and (names := sorted(set(mesh_fields(path.read_text())) - MESH_HOLDERS))
    }
    assert not found, found


# one run setup, one schedule: `jaxeval plan` runs the run's own code (`lm.setup.run_setup`,
# `lm.dry_run.DryRunLM`: `JaxLM`'s request methods) and counts the engine's typed calls
# (`lm.generate.calls`); nothing in plan/ is a second model adapter or a copy of the keys
ENGINE_KINDS = {"init", "prefix", "admit", "decode", "peek", "shrink"}


def planner_restatements(source: str) -> list[str]:
    """`line: what` for each class of `source` that is an LM (a base named LM or JaxLM, or the
    request methods), each tuple literal that starts with an engine call's kind, and each slice
    of a `.detail` (an executable key unpacked by position)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            bases = {ast.unparse(b).rpartition(".")[2] for b in node.bases}
            methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
            if bases & {"LM", "JaxLM"} or {"loglikelihood", "generate_until"} <= methods:
                out.append(f"{node.lineno}: class {node.name} is an LM")
        elif isinstance(node, ast.Tuple) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value in ENGINE_KINDS:
                out.append(f"{node.lineno}: key {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("detail"):
            out.append(f"{node.lineno}: {ast.unparse(node)}")
    return out


def test_planner_restatements_are_found():
    code = (
        "class RequestRecorder(LM):\n    pass\n"
        "class Fake:\n    def loglikelihood(self): ...\n    def generate_until(self): ...\n"
        "key = ('decode', rows, slots)\n"
        "u, r = use.detail[4:]\n"
        "ok = ('score', 1)\n"
    )
    assert planner_restatements(code) == [
        "1: class RequestRecorder is an LM",
        "3: class Fake is an LM",
        "6: key ('decode', rows, slots)",
        "7: use.detail[4:]",
    ]


def test_the_planner_defines_no_lm_and_restates_no_engine_key():
    """`jaxeval plan` calls the run's setup and counts the engine's own calls; the engine's
    executable keys are typed values (`lm.generate.calls`), never tuples spelled by kind."""
    found = {}
    for path in _modules().values():
        rel = str(path.relative_to(REPO))
        found_here = planner_restatements(path.read_text())
        if not rel.startswith("jaxeval/plan/"):  # elsewhere only the keys count
            found_here = [f for f in found_here if " key " in f]
        if found_here:
            found[rel] = found_here
    assert not found, found


def parameter_count_rules(source: str) -> list[str]:
    """The functions of `source` that count parameters (`param_count`, `active_param_count`) and
    take the embedding and head out (`tie_embeddings`) themselves."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.unparse(node)
            if re.search(r"\bparam_count\(", text) and "tie_embeddings" in text:
                out.append(f"{node.lineno}: {node.name}")
    return out


def test_parameter_count_rules_are_found():
    code = (
        "def body(spec):\n"
        "    embed = spec.vocab_size * spec.hidden_size\n"
        "    return spec.param_count() - embed - (0 if spec.tie_embeddings else embed)\n"
        "def fine(spec):\n    return spec.body_param_count()\n"
    )
    assert parameter_count_rules(code) == ["1: body"]


def test_the_parameter_count_has_one_definition():
    """Parameters outside the embedding and the head are `ModelSpec.body_param_count` (every
    expert, or K of X routed experts with `active`); the point cost, the plan's FLOPs and the
    decoder's weight-traffic rule all call it."""
    found = {
        str(path.relative_to(REPO)): names
        for path in _modules().values()
        if (names := parameter_count_rules(path.read_text()))
    }
    assert set(found) == {"jaxeval/models/spec.py"}, found


def model_type_branches(source: str) -> list[str]:
    """`isinstance(x, ModelSpec)` in `source` (a tuple of accepted types, the check of what a
    caller handed over, is not a branch on the kind of model)."""
    return [
        f"{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and ast.unparse(node.func) == "isinstance"
        and len(node.args) == 2
        and ast.unparse(node.args[1]).rpartition(".")[2] == "ModelSpec"
    ]


def test_model_type_branches_are_found():
    code = "a = isinstance(spec, ModelSpec)\nb = isinstance(m, (ModelSpec, FunctionModel))\n"
    assert model_type_branches(code) == ["1: isinstance(spec, ModelSpec)"]


def test_what_a_model_can_do_is_declared_not_inferred_from_its_type():
    """Outside the models package the run reads `contract.Capabilities` (`capabilities_of`),
    never whether the model is a `ModelSpec`."""
    found = {
        str(path.relative_to(REPO)): names
        for name, path in _modules().items()
        if not name.startswith("jaxeval.models")
        and (names := model_type_branches(path.read_text()))
    }
    assert not found, found


def test_the_readme_layout_lists_every_package():
    """README's Layout table names every package of jaxeval/ (a new one is added there too)."""
    text = (REPO / "README.md").read_text()
    table = text[text.index("## Layout") :]
    table = table[: table.index("\n\n", table.index("| path |"))]
    listed = set(re.findall(r"`jaxeval/(\w+)/`", table))
    packages = {p.parent.name for p in (REPO / "jaxeval").glob("*/__init__.py")}
    assert packages - listed == set(), f"add to README's Layout table: {sorted(packages - listed)}"


def outside_citations(text: str, repo: pathlib.Path) -> list[str]:
    """Paths a document cites that the repository does not hold: any `../` path, and any
    backticked path with a folder that is neither under the repository nor under jaxeval/."""
    out = sorted(set(re.findall(r"\.\./[\w./-]+", text)))
    for cited in sorted(set(re.findall(r"`([\w.-]+(?:/[\w.-]+)+)`", text))):
        if cited.startswith(".."):
            continue
        if "." in cited.rpartition("/")[2] and not any(
            (base / cited).exists() for base in (repo, repo / "jaxeval")
        ):
            out.append(cited)
    return out


def test_outside_citations_are_found(tmp_path):
    (tmp_path / "jaxeval" / "lm").mkdir(parents=True)
    (tmp_path / "jaxeval" / "lm" / "setup.py").write_text("")
    text = "See `lm/setup.py`, `jaxeval/lm/setup.py`, `../elsewhere/notes.md` and `lm/gone.py`."
    assert outside_citations(text, tmp_path) == ["../elsewhere/notes.md", "lm/gone.py"]


def test_the_architecture_page_cites_only_the_repository():
    assert outside_citations((REPO / "docs" / "architecture.md").read_text(), REPO) == []
