"""A tiny model that honours the model contract the scoring kernel codes against.

One attention layer (learned absolute positions, so wrong per-segment positions change results) and
one MLP, in plain jnp, with the packed segment/parent attention rule. `hidden_alone` is the
reference: the same network over a single unpacked sequence, with a plain causal mask.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class ToyModel:
    vocab_size: int = 97
    width: int = 16
    max_position_embeddings: int = 512
    softcap: float | None = None

    def init(self, seed: int = 0) -> dict:
        rng = np.random.default_rng(seed)
        d, v = self.width, self.vocab_size

        def w(*shape, scale=1.0):
            return jnp.asarray(rng.normal(size=shape) * scale / np.sqrt(shape[0]), jnp.float32)

        return {
            "embed": w(v, d, scale=np.sqrt(v)),
            "pos": w(
                self.max_position_embeddings, d, scale=np.sqrt(self.max_position_embeddings) * 0.5
            ),
            "wq": w(d, d),
            "wk": w(d, d),
            "wv": w(d, d),
            "wo": w(d, d),
            "w1": w(d, 4 * d),
            "w2": w(4 * d, d),
            "head": w(v, d, scale=3.0 * np.sqrt(v)),
        }

    def _block(self, params, x, mask):
        q, k, v = x @ params["wq"], x @ params["wk"], x @ params["wv"]
        s = jnp.einsum("btd,bsd->bts", q, k) / np.sqrt(self.width)
        s = jnp.where(mask, s, -1e30)
        x = x + jnp.einsum("bts,bsd->btd", jax.nn.softmax(s, axis=-1), v) @ params["wo"]
        x = x + jax.nn.gelu(x @ params["w1"]) @ params["w2"]
        return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)

    def hidden(self, params, tokens, positions, segment, parent, *, runtime=None):
        t = tokens.shape[1]
        causal = jnp.arange(t)[:, None] >= jnp.arange(t)[None, :]
        seg_k = segment[:, None, :]
        related = (seg_k == segment[:, :, None]) | (seg_k == parent[:, :, None])
        mask = (seg_k != 0) & causal[None] & related
        x = params["embed"][tokens] + params["pos"][positions]
        return self._block(params, x, mask)

    def hidden_alone(self, params, tokens):
        tokens = jnp.asarray(tokens)[None]
        t = tokens.shape[1]
        x = params["embed"][tokens] + params["pos"][jnp.arange(t)][None]
        mask = (jnp.arange(t)[:, None] >= jnp.arange(t)[None, :])[None]
        return self._block(params, x, mask)[0]

    def head_weight(self, params):
        return params["head"]

    def finalize_logits(self, logits):
        if self.softcap is None:
            return logits
        return jnp.tanh(logits / self.softcap) * self.softcap

    def head(self, params, h):
        return self.finalize_logits(h @ self.head_weight(params).T)


def reference_score(model: ToyModel, params, context, continuation) -> tuple[float, bool]:
    """lm-eval's computation for one request: full log_softmax, gather, sum, argmax == target."""
    inp = list(context) + list(continuation)[:-1]
    logits = np.asarray(model.head(params, model.hidden_alone(params, inp)), np.float32)
    logits = logits[len(context) - 1 :]
    m = logits.max(-1, keepdims=True)
    lp = (logits - m) - np.log(np.exp(logits - m).sum(-1, keepdims=True))
    cont = np.asarray(continuation)
    ll = float(lp[np.arange(len(cont)), cont].sum(dtype=np.float32))
    return ll, bool((lp.argmax(-1) == cont).all())


def greedy_continuation(model: ToyModel, params, context, n: int) -> list[int]:
    toks = list(context)
    for _ in range(n):
        logits = np.asarray(model.head(params, model.hidden_alone(params, toks)))
        toks.append(int(logits[-1].argmax()))
    return toks[len(context) :]
