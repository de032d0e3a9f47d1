"""WinoGrande as "partial scoring": the two options fill the blank to make two *contexts*, and the
model scores the one shared continuation (the text after the blank) under each.

    {"sentence": "Sarah was a much better surgeon than Maria so _ always got the harder cases.",
     "option1": "Sarah", "option2": "Maria", "answer": "1"}
    doc_to_choice -> ["Sarah was a much better surgeon than Maria so Sarah",
                      "Sarah was a much better surgeon than Maria so Maria"]
    doc_to_target -> "always got the harder cases."
    doc_to_text   -> 0                      (the gold context's index: answer "1" -> 0, "2" -> 1)
"""

from __future__ import annotations

_GOLD_INDEX = {"1": 0, "2": 1}


def doc_to_text(doc: dict) -> int:
    """The index of the correct context (an int, which marks the task as multiple-input)."""
    return _GOLD_INDEX[doc["answer"]]


def doc_to_target(doc: dict) -> str:
    """The sentence after the first "_", stripped."""
    sentence = doc["sentence"]
    return sentence[sentence.index("_") + 1 :].strip()


def doc_to_choice(doc: dict) -> list[str]:
    """The sentence up to the first "_", completed by each option."""
    sentence = doc["sentence"]
    prefix = sentence[: sentence.index("_")]
    return [prefix + option for option in (doc["option1"], doc["option2"])]
