"""A document whose doc_to_choice gives no choices is named as such: one paragraph, exit 2."""

from __future__ import annotations

import json
import textwrap

import pytest

from jaxeval.cli import main
from jaxeval.lm.base import MODELS
from tests.api import fake_lm


@pytest.fixture(autouse=True)
def fake_model():
    cls = type(fake_lm.make_jaxeval_lm())

    class Fake(cls):
        def __init__(self, **kwargs):
            pass

    MODELS.add("fake_choices", Fake, replace=True)
    yield


def test_empty_choices_name_the_document(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    rows = [
        {"q": "one?", "choices": ["a", "b"], "gold": 1},
        {"q": "two?", "choices": [], "gold": 0},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = tmp_path / "t.yaml"
    task.write_text(
        textwrap.dedent(f"""\
            task: empty_choices
            dataset_path: json
            dataset_kwargs:
              data_files:
                test: {data}
            test_split: test
            output_type: multiple_choice
            doc_to_text: "{{{{q}}}}"
            doc_to_choice: choices
            doc_to_target: gold
            """)
    )
    out = tmp_path / "out"
    rc = main(["run", "--model", "fake_choices", "--tasks", str(task), "--output_path", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert "doc_to_choice produced no choices for document 1" in err
    assert "task 'empty_choices'" in err and "field 'doc_to_choice'" in err
    assert "outside the 0 choices" not in err and not out.exists()
