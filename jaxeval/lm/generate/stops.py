"""Host-side tables for on-device stop detection (`jaxeval.kernels.stop_match`), and the final cut.

`token_bytes(tokenizer, vocab_size, width)` gives every token id the bytes it adds to the decoded
text (`decode(..., skip_special_tokens=True)`), so the device can rebuild the tail of each row's
text as it generates:

    byte-level BPE   "Ġthe" -> b" the"      "Ċ" -> b"\\n"     "Ã" (half of "é") -> b"\\xc3"
    SentencePiece    "▁the" -> b" the"      "<0x0A>" -> b"\\n"
    special tokens   "</s>" -> b""          (decoding skips them)

A token's text is taken in context, `decode([anchor, t])` minus `decode([anchor])`, so decoders that
strip a leading space on the first token still report it. Where that text is not valid UTF-8 on
its own (a partial character), the bytes come from the token's vocabulary string (byte-level
alphabet or `<0xNN>` byte-fallback); if neither applies the token is marked unknown (all -1), which
only ever makes the device miss a stop, never invent one.

`stop_rows` turns one request's stop strings into the kernel's per-row arrays: strings that are a
special token's text become stop token ids (decoding skips those tokens, so the text never shows
them), the rest become right-aligned UTF-8 bytes; strings longer than M bytes are left to the host.
`cut_at_stops` is lm-eval's `postprocess_generated_text`: `s.split(stop)[0]` for each non-empty stop.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxeval.kernels.stop_match import NO_BYTE, STOP_PAD

BUFFER_BYTES = 64  # Y (text-buffer bytes per row)
STOP_BYTES = 32  # M
STOP_STRINGS = 8  # S
STOP_TOKENS = 8  # E
_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_TABLES: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}


def _gpt2_byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's `bytes_to_unicode` alphabet."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, codes)}


def _is_byte_level(tokenizer: Any) -> bool:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    try:  # the decoder's own JSON (not the whole tokenizer's: that holds the vocabulary too)
        decoder = json.loads(backend.decoder.__getstate__()) if backend.decoder else {}
    except Exception:
        try:
            decoder = json.loads(backend.to_str()).get("decoder") or {}
        except Exception:
            return False
    return "ByteLevel" in json.dumps(decoder)


def _vocab_bytes(piece: str | None, byte_level: bool, byte_decoder: dict[str, int]) -> bytes | None:
    if piece is None:
        return None
    m = _BYTE_FALLBACK.match(piece)
    if m:
        return bytes([int(m.group(1), 16)])
    if byte_level and all(ch in byte_decoder for ch in piece):
        return bytes(byte_decoder[ch] for ch in piece)
    return None


def _decode_all(sequences: list[list[int]], tokenizer: Any) -> list[str]:
    """`tokenizer.batch_decode(sequences, skip_special_tokens=False, clean_up_tokenization_spaces=
    False)`; for transformers' fast tokenizers (whose `decode` is the backend's with no cleanup)
    straight through the Rust backend's `decode_batch`, ~7x faster over a 49k vocabulary."""
    backend = getattr(tokenizer, "_tokenizer", None)
    fast = False
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend

        cls = type(tokenizer)
        fast = (
            isinstance(tokenizer, TokenizersBackend)
            and cls._decode is TokenizersBackend._decode
            and cls.decode is PreTrainedTokenizerBase.decode
            and cls.batch_decode is PreTrainedTokenizerBase.batch_decode
            and hasattr(backend, "decode_batch")
        )
    except ImportError:
        pass
    if fast:
        return backend.decode_batch(sequences, skip_special_tokens=False)
    return tokenizer.batch_decode(
        sequences, skip_special_tokens=False, clean_up_tokenization_spaces=False
    )


def token_bytes(
    tokenizer: Any, vocab_size: int, width: int = BUFFER_BYTES
) -> tuple[np.ndarray, np.ndarray]:
    """(int16[V, Y] right-aligned last bytes, int32[V] byte counts) for every model token id."""
    key = (id(tokenizer), vocab_size, width)
    if key in _TABLES:
        return _TABLES[key]
    n_tok = min(vocab_size, len(tokenizer))
    special = set(int(i) for i in tokenizer.all_special_ids)
    anchor = next(i for i in tokenizer.encode("a", add_special_tokens=False) if i not in special)
    head = tokenizer.decode([anchor], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    texts = _decode_all([[anchor, t] for t in range(n_tok)], tokenizer)
    pieces = tokenizer.convert_ids_to_tokens(list(range(n_tok)))
    byte_level = _is_byte_level(tokenizer)
    byte_decoder = _gpt2_byte_decoder() if byte_level else {}

    table = np.full((vocab_size, width), NO_BYTE, np.int16)
    lengths = np.full(vocab_size, width, np.int32)  # unknown unless set below
    for t in range(n_tok):
        if t in special:
            lengths[t] = 0
            continue
        text = texts[t][len(head) :] if texts[t].startswith(head) else None
        data = None
        if text is not None and "\ufffd" not in text:
            data = text.encode("utf-8")
        else:
            data = _vocab_bytes(pieces[t], byte_level, byte_decoder)
        if data is None:
            continue
        data = data[-width:]
        lengths[t] = len(data)
        if data:
            table[t, width - len(data) :] = np.frombuffer(data, np.uint8)
    _TABLES[key] = (table, lengths)
    return table, lengths


def special_token_ids(tokenizer: Any) -> dict[str, int]:
    """Text -> id of every special token (what `decode(skip_special_tokens=True)` drops)."""
    out = {}
    for tid in tokenizer.all_special_ids:
        out.setdefault(tokenizer.convert_ids_to_tokens(int(tid)), int(tid))
    return out


@dataclasses.dataclass(frozen=True)
class StopRows:
    stop_ids: np.ndarray  # int32[I]
    stops: np.ndarray  # int32[Z, M]
    max_new_cap: int | None  # lm-eval stops after 1 token when a stop string is ""


def stop_rows(
    until: Sequence[str],
    *,
    eos_ids: Sequence[int],
    specials: dict[str, int],
    device_strings: bool = True,
) -> StopRows:
    """Per-row stop arrays for the kernel (module docstring); eos_ids always end the row."""
    ids = list(dict.fromkeys(int(i) for i in eos_ids))
    strings: list[bytes] = []
    cap = None
    for stop in until:
        if stop == "":
            cap = 1  # MultiTokenEOSCriteria: "" is in every text, so the batch stops at once
        elif stop in specials:
            ids.append(specials[stop])
        elif device_strings:
            data = stop.encode("utf-8")
            if len(data) <= STOP_BYTES:
                strings.append(data)
    ids = list(dict.fromkeys(ids))[:STOP_TOKENS]
    stop_ids = np.full(STOP_TOKENS, -1, np.int32)
    stop_ids[: len(ids)] = ids
    stops = np.full((STOP_STRINGS, STOP_BYTES), STOP_PAD, np.int32)
    for i, data in enumerate(list(dict.fromkeys(strings))[:STOP_STRINGS]):
        stops[i, STOP_BYTES - len(data) :] = np.frombuffer(data, np.uint8)
    return StopRows(stop_ids=stop_ids, stops=stops, max_new_cap=cap)


def cut_at_stops(text: str, until: Sequence[str]) -> str:
    """lm-eval's `postprocess_generated_text` (no think token): cut at the earliest stop string."""
    for stop in until:
        if stop:
            text = text.split(stop)[0]
    return text


def contains_stop(text: str, until: Sequence[str]) -> bool:
    return any(stop and stop in text for stop in until)
