"""Many strings to token ids through the Rust tokenizer directly, equal to `tokenizer(strings)`.

    encode = BatchTokenizer(tokenizer)
    encode(["Question: 2 + 2?", " 4"], add_special_tokens=True)  -> [[1, 2, 3, 4, 5], [6]]
                                        == tokenizer([...], add_special_tokens=True)["input_ids"]

A transformers fast tokenizer (`TokenizersBackend`) called on a list of strings sets no truncation
and no padding on its Rust tokenizer, sets `encode_special_tokens` from `split_special_tokens`, runs
`encode_batch` (on every core, in Rust) and then converts every encoding to Python lists of ids,
type ids, attention masks and special-token masks one at a time in Python. That conversion costs as
much as the tokenizing on short strings; this module skips it: it makes the same settings, calls
`encode_batch_fast` (the same ids, without character offsets) and keeps only `.ids`.

It is used only where it is known to be equal: the tokenizer is a `TokenizersBackend` whose
`__call__` and `_encode_plus` are transformers' own (no subclass rewrites the text first), and the
first strings it meets give the same ids both ways (checked once per tokenizer and flag). Anything
else, a slow tokenizer included, goes through `tokenizer(strings)` unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

CHECKED_STRINGS = 32  # strings compared against the tokenizer's own call on first use


def _backend_is_plain(tokenizer: Any) -> bool:
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:  # another transformers layout: use the tokenizer's own call
        return False
    cls = type(tokenizer)
    return (
        isinstance(tokenizer, TokenizersBackend)
        and cls.__call__ is PreTrainedTokenizerBase.__call__
        and cls._encode_plus is TokenizersBackend._encode_plus
        and cls.set_truncation_and_padding is TokenizersBackend.set_truncation_and_padding
        and hasattr(getattr(tokenizer, "_tokenizer", None), "encode_batch_fast")
    )


class BatchTokenizer:
    """`tokenizer(strings, add_special_tokens=flag)["input_ids"]`, through Rust where equal."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.direct = _backend_is_plain(tokenizer)
        self._checked: set[bool] = set()

    def _rust(self, strings: Sequence[str], add_special_tokens: bool) -> list[list[int]]:
        from transformers.tokenization_utils_base import PaddingStrategy, TruncationStrategy

        tok = self.tokenizer
        tok.set_truncation_and_padding(
            padding_strategy=PaddingStrategy.DO_NOT_PAD,
            truncation_strategy=TruncationStrategy.DO_NOT_TRUNCATE,
            max_length=None,
            stride=0,
            pad_to_multiple_of=None,
            padding_side=None,
        )
        backend = tok._tokenizer
        if backend.encode_special_tokens != tok.split_special_tokens:
            backend.encode_special_tokens = tok.split_special_tokens
        encodings = backend.encode_batch_fast(list(strings), add_special_tokens=add_special_tokens)
        return [e.ids for e in encodings]

    def _call(self, strings: Sequence[str], add_special_tokens: bool) -> list[list[int]]:
        ids = self.tokenizer(list(strings), add_special_tokens=add_special_tokens)["input_ids"]
        return [list(x) for x in ids]

    def __call__(
        self, strings: Sequence[str], *, add_special_tokens: bool = True
    ) -> list[list[int]]:
        if not strings:
            return []
        if not self.direct:
            return self._call(strings, add_special_tokens)
        if add_special_tokens not in self._checked:
            sample = list(strings[:CHECKED_STRINGS])
            if self._rust(sample, add_special_tokens) != self._call(sample, add_special_tokens):
                log.debug("the Rust tokenizer differs from the tokenizer's call; using the call")
                self.direct = False
                return self._call(strings, add_special_tokens)
            self._checked.add(add_special_tokens)
        return self._rust(strings, add_special_tokens)
