"""Bad input fails fast: one paragraph naming file / field / document, exit code 2, no results file.

Checks that need no model run with `--model never`, a model whose constructor fails the test: the
error must come before the model loads. Model-side checks use a tiny local checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap

import pytest

from jaxeval.cli import main
from jaxeval.errors import JaxevalError
from jaxeval.lm.base import MODELS
from tests.api import fake_lm


@pytest.fixture(autouse=True)
def never_model():
    cls = type(fake_lm.make_jaxeval_lm())

    class Never(cls):
        def __init__(self, **kwargs):
            raise AssertionError("the model was built before the bad input was found")

    MODELS.add("never", Never, replace=True)
    yield


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    from tests.helpers.tiny_models import make_tiny_checkpoint

    return make_tiny_checkpoint("llama", str(tmp_path_factory.mktemp("tiny")), seed=3)


def run_cli(capsys, *args: str) -> tuple[int, str]:
    rc = main(["run", *args])
    return rc, capsys.readouterr().err


def run_task(capsys, folder: str, *args: str, model: str = "never") -> tuple[int, str]:
    """`jaxeval run --model MODEL --tasks preflight_task --include_path FOLDER ARGS...`"""
    return run_cli(
        capsys, "--model", model, "--tasks", "preflight_task", "--include_path", folder, *args
    )


def no_results(out) -> bool:
    return not list(out.rglob("results_*.json")) if out.exists() else True


TASK = textwrap.dedent("""\
    task: preflight_task
    dataset_path: json
    dataset_kwargs:
      data_files:
        test: {data}
    test_split: test
    fewshot_split: test
    output_type: generate_until
    doc_to_text: "{{{{q}}}}"
    doc_to_target: "{{{{a}}}}"
    generation_kwargs:
      until: ["\\n"]
    metric_list:
      - metric: exact_match
    """)


def _task(tmp_path, rows=None, raw: bytes | None = None) -> str:
    folder = tmp_path / "tasks"
    folder.mkdir(exist_ok=True)
    data = folder / "data.jsonl"
    if raw is not None:
        data.write_bytes(raw)
    else:
        rows = rows or [{"q": "1+1?", "a": "2"}, {"q": "2+2?", "a": "4"}]
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "preflight_task.yaml").write_text(TASK.format(data=data))
    return str(folder)


# -- output path -------------------------------------------------------------------------------


def test_output_path_is_an_existing_file(tmp_path, capsys):
    target = tmp_path / "results.txt"
    target.write_text("keep me")
    rc, err = run_task(capsys, _task(tmp_path), "--output_path", str(target))
    assert rc == 2 and "output_path" in err and str(target) in err and "existing file" in err
    assert target.read_text() == "keep me"


def test_output_path_in_unwritable_directory(tmp_path, capsys, unwritable):
    out = os.path.join(unwritable, "out")
    rc, err = run_task(capsys, _task(tmp_path), "--output_path", out)
    assert rc == 2 and "output_path" in err and unwritable in err and "cannot write" in err
    assert not os.path.exists(out)


# -- generation kwargs, batch size ----------------------------------------------------------------


def test_gen_kwargs_value_of_wrong_type(tmp_path, capsys):
    out = tmp_path / "out"
    rc, err = run_task(
        capsys, _task(tmp_path), "--gen_kwargs", "temperature=hot", "--output_path", str(out)
    )
    assert rc == 2 and "temperature='hot' is not a number" in err
    assert "preflight_task.yaml" in err and "generation_kwargs.temperature" in err
    assert no_results(out)


def test_gen_kwargs_unknown_key_before_the_model(tmp_path, capsys):
    rc, err = run_task(capsys, _task(tmp_path), "--gen_kwargs", "num_beams=4")
    assert rc == 2 and "num_beams" in err and "task 'preflight_task'" in err


def test_malformed_gen_kwargs_is_blamed_on_gen_kwargs(tmp_path, capsys):
    rc, err = run_task(capsys, _task(tmp_path), "--gen_kwargs", "temperature")
    assert rc == 2 and "field 'gen_kwargs'" in err and "--gen_kwargs entry" in err
    assert "model_args" not in err


@pytest.mark.parametrize("value", ["auto:banana", "auto:0", "auto:"])
def test_batch_size_auto_with_a_bad_count(capsys, value):
    with pytest.raises(SystemExit) as e:
        main(["run", "--model", "never", "--tasks", "x", "--batch_size", value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--batch_size" in err and value in err


# -- few-shot pool, response cache ----------------------------------------------------------------


def test_fewshot_pool_too_small_before_the_model(tmp_path, capsys):
    out = tmp_path / "out"
    rc, err = run_task(capsys, _task(tmp_path), "--num_fewshot", "5", "--output_path", str(out))
    assert rc == 2 and "pool has only 2" in err and "field 'num_fewshot'" in err
    assert "task 'preflight_task'" in err and no_results(out)


def test_use_cache_in_unwritable_location(tmp_path, capsys, unwritable):
    prefix = os.path.join(unwritable, "cache", "lm")
    rc, err = run_task(capsys, _task(tmp_path), "--use_cache", prefix)
    assert rc == 2 and "field 'use_cache'" in err and prefix in err


def test_use_cache_under_a_file(tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    rc, err = run_task(capsys, _task(tmp_path), "--use_cache", str(blocker / "lm"))
    assert rc == 2 and "field 'use_cache'" in err and str(blocker) in err


# -- data files, YAML ------------------------------------------------------------------------------


def test_non_utf8_data_file(tmp_path, capsys):
    folder = _task(tmp_path, raw=b'{"q": "caf\xe9?", "a": "x"}\n')
    rc, err = run_task(capsys, folder)
    assert rc == 2 and "not UTF-8" in err and "data.jsonl" in err and "line 1" in err


def test_empty_data_file_is_not_blamed_on_the_hub(tmp_path, capsys):
    rc, err = run_task(capsys, _task(tmp_path, raw=b""))
    assert rc == 2 and "data file is empty" in err and "data.jsonl" in err
    assert "offline" not in err and "hub" not in err


def test_malformed_yaml_under_include_path_is_named(tmp_path, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "broken.yaml").write_text("task: mine\n  dataset_path: [unclosed\n")
    rc, err = run_cli(capsys, "--model", "never", "--tasks", "mine", "--include_path", str(folder))
    assert rc == 2 and "unknown task" in err and "broken.yaml" in err and "malformed YAML" in err


# -- the model's files -----------------------------------------------------------------------------


def test_truncated_safetensors_header(tmp_path, tiny_ckpt, capsys):
    broken = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    out = tmp_path / "out"
    rc, err = run_task(
        capsys,
        _task(tmp_path),
        "--model_args",
        f"pretrained={broken}",
        "--output_path",
        str(out),
        model="jax",
    )
    assert rc == 2 and str(weights) in err and "truncated or corrupt" in err and no_results(out)


def test_missing_tokenizer_is_not_a_sentencepiece_hint(tmp_path, tiny_ckpt, capsys):
    bare = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, bare)
    for name in os.listdir(bare):
        if name.startswith(("tokenizer", "special_tokens", "vocab", "merges")):
            os.unlink(bare / name)
    rc, err = run_task(capsys, _task(tmp_path), "--model_args", f"pretrained={bare}", model="jax")
    assert rc == 2 and "no tokenizer files" in err and str(bare) in err
    assert "field 'tokenizer'" in err and "sentencepiece" not in err


@pytest.mark.slow
def test_token_ids_outside_the_vocabulary_fail_before_any_compute(tiny_ckpt):
    from jaxeval.lm.jax_lm import JaxLM

    lm = JaxLM(pretrained=tiny_ckpt, dtype="float32", mesh="single", max_length=64)
    vocab = lm.loaded.spec.vocab_size
    with pytest.raises(JaxevalError) as e:
        lm.loglikelihood_tokens([([1, 2, 3], [4]), ([1, 2], [vocab + 7])])
    assert f"token id {vocab + 7}" in str(e.value) and "request 1" in str(e.value)
    assert "'tokenizer'" in str(e.value) and lm.scorer.compile_count == 0
