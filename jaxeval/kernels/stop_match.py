"""Stop strings matched on device as bytes of the decoded text, whatever the tokenization.

A stop string can span token boundaries and tokenize differently in context ("\\n\\n" may come out as
one token or as two "\\n"), so matching token-id sequences misses stops. Instead each row keeps the
last Y bytes of its generated text in a rolling buffer; every step appends the new token's bytes
(from a [V, Y] table built on the host, `jaxeval.lm.generate.stops`) and looks for each of the row's stop
strings (as UTF-8 bytes, right-aligned in [Z, M]) anywhere in the buffer.

    Y = 8, the row has generated "Answer"; the new token is " 4\\n" (3 bytes):
        before  [ .  .  A  n  s  w  e  r ]      (. = no text yet, -1)
        after   [ n  s  w  e  r  ' ' 4  \\n ]    (3 cells fall off the left, the token fills the end)
    a stop "r 4" (M = 4, right-aligned as [pad, r, ' ', 4]) is found ending at cell 6.

Table conventions: a token's row holds its last Y bytes right-aligned; `lengths[v]` is how many are
real (0 for special tokens, which decoding skips). A token whose bytes are unknown has length Y and
all -1, which wipes the buffer: the check then misses a stop rather than inventing one. -1 never
equals a stop byte, so the device only ever stops a row on text that really contains the stop; the
host still makes the final cut by string search.

Dimension names: `jaxeval.shapes`.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxeval.shapes import Bool, Int

# 1-D shape annotations as names: a lone letter in a string reads as an undefined name to linters
BoolB = Bool["B"]
IntB = Int["B"]
IntV = Int["V"]

NO_BYTE = -1  # empty buffer cell / unknown byte; never matches
STOP_PAD = -2  # padding of right-aligned stop strings (a "don't care" cell)


def append_token_bytes(
    buffer: Int["B Y"], tokens: IntB, table: Int["V Y"], lengths: IntV
) -> Int["B Y"]:
    """Shifts each row's buffer left by its token's byte length and writes the token's bytes at the end."""
    w = buffer.shape[1]
    n = lengths[tokens].astype(jnp.int32)  # [B]
    tok = table[tokens].astype(jnp.int32)  # [B, Y] right-aligned
    cols = jnp.arange(w)[None, :]  # [1, Y]
    shifted = jnp.take_along_axis(buffer, jnp.minimum(cols + n[:, None], w - 1), axis=1)
    return jnp.where(cols >= w - n[:, None], tok, shifted)


def stop_found(buffer: Int["B Y"], stops: Int["B Z M"]) -> BoolB:
    """True where some stop string (right-aligned, STOP_PAD-padded) occurs in the row's buffer."""
    b, w = buffer.shape
    m = stops.shape[2]
    padded = jnp.concatenate([jnp.full((b, m - 1), NO_BYTE, buffer.dtype), buffer], axis=1)
    idx = jnp.arange(w)[:, None] + jnp.arange(m)[None, :]  # [Y, M]: by the cell a window ends at
    windows = padded[:, idx]  # [B, Y, M]: the M bytes ending at each buffer cell
    care = stops != STOP_PAD  # [B, Z, M]
    nonempty = jnp.any(care, axis=-1)  # [B, Z]
    eq = windows[:, None, :, :] == stops[:, :, None, :]  # [B, Z, Y, M]
    hit = jnp.all(eq | ~care[:, :, None, :], axis=-1)  # [B, Z, Y]
    return jnp.any(jnp.any(hit, axis=-1) & nonempty, axis=-1)


def stop_token_hit(tokens: IntB, stop_ids: Int["B I"]) -> BoolB:
    """True where the token is one of the row's stop token ids (EOS ids; -1 padding never matches)."""
    return jnp.any(tokens[:, None] == stop_ids, axis=-1)


def empty_buffer(batch: int, width: int) -> Int["B Y"]:
    return jnp.full((batch, width), NO_BYTE, jnp.int32)


__all__ = [
    "NO_BYTE",
    "STOP_PAD",
    "append_token_bytes",
    "empty_buffer",
    "stop_found",
    "stop_token_hit",
]
