"""A bad model file is one paragraph and exit 2 from `jaxeval run`, never a traceback: a corrupt
config.json, a GGUF with a bad alignment or head count, a GGUF tokenizer that cannot be built."""

from __future__ import annotations

import json
import textwrap

import pytest

from jaxeval.cli import main
from jaxeval.errors import JaxevalError
from tests.helpers.crafted_models import patched_checkpoint, write_llama_gguf

pytest.importorskip("gguf")


@pytest.fixture
def task_yaml(tmp_path) -> str:
    """A two-document multiple-choice task on a local file: it loads without the model."""
    data = tmp_path / "data.jsonl"
    rows = [{"q": "one?", "choices": ["a", "b"], "gold": 1}, {"q": "two?", "choices": ["c", "d"]}]
    data.write_text("".join(json.dumps({"gold": 0, **r}) + "\n" for r in rows))
    path = tmp_path / "mc.yaml"
    path.write_text(
        textwrap.dedent(f"""\
            task: tiny_mc
            dataset_path: json
            dataset_kwargs:
              data_files:
                test: {data}
            test_split: test
            output_type: multiple_choice
            doc_to_text: "{{{{q}}}}"
            doc_to_choice: "{{{{choices}}}}"
            doc_to_target: "{{{{gold}}}}"
            """)
    )
    return str(path)


def _run(capsys, task: str, model_args: str, out) -> tuple[int, str]:
    argv = ["run", "--model", "jax", "--model_args", model_args, "--tasks", task]
    rc = main([*argv, "--output_path", str(out)])
    return rc, capsys.readouterr().err


def _gguf(tmp_path, **meta) -> str:
    return f"pretrained={write_llama_gguf(str(tmp_path / 'm.gguf'), **meta)}"


def _config(tmp_path, tiny, text: str) -> str:
    return f"pretrained={patched_checkpoint(tiny('llama'), str(tmp_path / 'm'), text=text)}"


@pytest.mark.parametrize(
    "make,needles",
    [
        (
            lambda p, t: _config(p, t, "{not json"),
            ["config.json", "is not valid JSON", "download the model's config.json again"],
        ),
        (lambda p, t: _config(p, t, "[1, 2]"), ["holds a JSON list, not an object"]),
        (lambda p, t: _gguf(p, alignment=0), ["'general.alignment'", "is 0", "power of two"]),
        (lambda p, t: _gguf(p, alignment="abc"), ["'general.alignment'", "is 'abc'"]),
        (lambda p, t: _gguf(p, head_count=0), ["'llama.attention.head_count'", "at least 1"]),
        (
            lambda p, t: _gguf(p, merges=False),
            ["'tokenizer.ggml.merges'", "tokenizer.ggml.model 'gpt2'", "no tokenizer.ggml.merges"],
        ),
        (
            lambda p, t: _gguf(p, tokenizer_model="llama", merges=False),
            ["'tokenizer.ggml.scores'", "tokenizer.ggml.model 'llama'", "tokenizer=<a Hugging"],
        ),
    ],
    ids=[
        "config not JSON",
        "config not an object",
        "alignment 0",
        "alignment not a number",
        "head count 0",
        "BPE without merges",
        "sentencepiece without scores",
    ],
)
def test_bad_model_file_is_one_paragraph_and_exit_2(
    capsys, tmp_path, tiny, task_yaml, make, needles
):
    rc, err = _run(capsys, task_yaml, make(tmp_path, tiny), tmp_path / "out")
    assert rc == 2, err
    assert "Traceback" not in err and "jaxeval: error: " in err
    assert len([line for line in err.splitlines() if line.startswith("jaxeval: error: ")]) == 1
    for needle in needles:
        assert needle in err, (needle, err)
    assert not (tmp_path / "out").exists()


def test_a_gguf_tokenizer_with_what_it_needs_loads(tmp_path):
    """The same files with merges (BPE) or scores (sentencepiece) build their tokenizers."""
    from jaxeval.models.weights.gguf import load_tokenizer
    from jaxeval.models.weights.gguf_file import GGUFFile

    bpe = write_llama_gguf(str(tmp_path / "bpe.gguf"))
    spm = str(tmp_path / "spm.gguf")
    write_llama_gguf(spm, tokenizer_model="llama", merges=False, scores=True)
    assert len(load_tokenizer(GGUFFile(bpe))) >= 32 and len(load_tokenizer(GGUFFile(spm))) >= 32


def test_a_bad_special_token_id_is_named(tmp_path):
    from jaxeval.models.weights.gguf import load_tokenizer
    from jaxeval.models.weights.gguf_file import GGUFFile

    f = GGUFFile(write_llama_gguf(str(tmp_path / "m.gguf")))
    f.metadata["tokenizer.ggml.bos_token_id"] = 99  # past the file's 32 tokens
    with pytest.raises(JaxevalError, match="'tokenizer.ggml.bos_token_id'.*token id 99"):
        load_tokenizer(f)


def test_a_bad_dtype_fails_before_any_model_file_is_opened(tiny, monkeypatch):
    from jaxeval.models import loader

    def opened(*args, **kwargs):
        raise AssertionError("the checkpoint was opened before the dtype was checked")

    monkeypatch.setattr(loader, "_open_checkpoint", opened)
    for field, kwargs in (
        ("dtype", {"dtype": "float8"}),
        ("compute_dtype", {"compute_dtype": "x"}),
    ):
        with pytest.raises(JaxevalError) as err:
            loader.load_model(tiny("llama"), **kwargs)
        assert f"field '{field}'" in str(err.value) and "bfloat16" in str(err.value)
