"""`!function` reaches only a file inside the YAML's folder; what is refused imports nothing.

Each refused case has a helper whose top level writes a marker file: the marker must not appear.
Valid names resolve to the file lm-eval's own loader (`lm_eval.tasks._yaml_loader`) picks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jaxeval.api.yaml_loader import load_yaml, resolve_function
from jaxeval.errors import JaxevalError

HELPER = """
from pathlib import Path
Path({marker!r}).write_text("ran")

def fn(doc):
    return {value!r}
"""


def _helper(path: Path, marker: Path, value: str = "ok") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HELPER.format(marker=str(marker), value=value))
    return path


def _task(folder: Path, qualname: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    yaml_path = folder / "task.yaml"
    yaml_path.write_text(f"task: t\nprocess_docs: !function {qualname}\n")
    return yaml_path


def _dotted(path: Path) -> str:
    """/tmp/a/b/evil.py -> '.tmp.a.b.evil': the absolute path a leading dot makes of a name."""
    return "." + ".".join(path.with_suffix("").parts[1:])


def test_a_leading_dot_cannot_reach_a_file_outside_the_folder(tmp_path):
    marker = tmp_path / "ran"
    evil = _helper(tmp_path / "elsewhere" / "evil.py", marker)
    yaml_path = _task(tmp_path / "tasks", f"{_dotted(evil.resolve())}.fn")
    with pytest.raises(JaxevalError) as err:
        load_yaml(yaml_path)
    message = str(err.value)
    assert "empty part" in message and str(yaml_path) in message and "'!function'" in message
    assert not marker.exists()  # refused before the import: its top level never ran


@pytest.mark.parametrize("qualname", ["utils..fn", "utils.", ".utils.fn", "..utils.fn"])
def test_empty_dotted_parts_are_refused_by_name(tmp_path, qualname):
    marker = tmp_path / "ran"
    _helper(tmp_path / "tasks" / "utils.py", marker)
    with pytest.raises(JaxevalError, match="empty part"):
        resolve_function(qualname, tmp_path / "tasks", source=tmp_path / "tasks" / "task.yaml")
    assert not marker.exists()


def test_an_absolute_module_path_is_outside_the_folder(tmp_path):
    marker = tmp_path / "ran"
    evil = _helper(tmp_path / "elsewhere" / "evil.py", marker)
    folder = tmp_path / "tasks"
    folder.mkdir()
    qualname = f"{evil.resolve().with_suffix('')}.fn"  # '/tmp/.../elsewhere/evil.fn'
    with pytest.raises(JaxevalError, match="outside the YAML's folder"):
        resolve_function(qualname, folder, source=folder / "task.yaml")
    assert not marker.exists()


def test_a_link_inside_the_folder_to_a_file_outside_is_refused(tmp_path):
    marker = tmp_path / "ran"
    evil = _helper(tmp_path / "elsewhere" / "evil.py", marker)
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "utils.py").symlink_to(evil)
    yaml_path = _task(folder, "utils.fn")
    with pytest.raises(JaxevalError) as err:
        load_yaml(yaml_path)
    assert "outside the YAML's folder" in str(err.value) and str(evil.resolve()) in str(err.value)
    assert not marker.exists()


def test_a_link_to_a_file_inside_the_folder_is_allowed(tmp_path):
    folder = tmp_path / "tasks"
    _helper(folder / "shared" / "real.py", tmp_path / "ran", value="linked")
    (folder / "utils.py").symlink_to(folder / "shared" / "real.py")
    assert resolve_function("utils.fn", folder, source=folder / "task.yaml")({}) == "linked"


@pytest.mark.parametrize(
    "qualname", ["utils.fn", "sub.helpers.fn", "sub/helpers.fn", "my-utils.fn"]
)
def test_valid_names_resolve_to_the_file_lm_eval_loads(tmp_path, qualname):
    from lm_eval.tasks._yaml_loader import _import_func_in_yml

    folder = tmp_path / "tasks"
    module = qualname.rpartition(".")[0]
    _helper(folder / f"{module.replace('.', os.sep)}.py", tmp_path / "ran", value=module)
    ours = resolve_function(qualname, folder, source=folder / "task.yaml")
    theirs = _import_func_in_yml(qualname, folder)
    assert ours({}) == theirs({}) == module
    assert Path(ours.__code__.co_filename).resolve() == Path(theirs.__code__.co_filename).resolve()


def test_a_name_from_an_installed_task_package_still_resolves(tmp_path):
    from lm_eval.tasks.hellaswag import utils

    fn = resolve_function("lm_eval.tasks.hellaswag.utils.preprocess", tmp_path, source=tmp_path)
    assert fn is utils.preprocess


def test_a_module_outside_the_task_packages_is_refused_before_import(tmp_path):
    with pytest.raises(JaxevalError, match="nothing else may be called"):
        resolve_function("os.system", tmp_path, source=tmp_path / "task.yaml")
