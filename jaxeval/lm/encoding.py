"""Text -> token ids exactly as lm-eval's HF backend (`HFLM`, `TemplateLM`) does it.

Everything here is host-side Python on lists of ints; nothing touches a device. The rules, with the
lm-eval 0.4.13 code they mirror:

* `Encoder.tok_encode` (`HFLM.tok_encode`): an explicit `add_special_tokens` wins, else
  `add_bos_token` when set, else the tokenizer's own default (BOS for Llama-style tokenizers, nothing
  for GPT-2-style ones). A string that already starts with the decoded prefix token is encoded with
  `add_special_tokens=False`, so a chat template's rendered BOS is not doubled.
* `Encoder.encode_pair` (`TemplateLM._encode_pair`): the context's trailing whitespace moves to the
  continuation, then `whole = enc(ctx + cont)`, `ctx_enc = enc(ctx)`, `cont_enc = whole[len(ctx_enc):]`.
* `Encoder.encode_request` (`TemplateLM.loglikelihood`): an empty context becomes `[prefix_token_id]`
  and the continuation is encoded without specials, unless it already starts with the prefix token.
* `truncate_request` (`HFLM._loglikelihood_tokens`): the model input is
  `(ctx + cont)[-(max_length + 1):][:-1]`, i.e. the context loses tokens on the left.
* `rolling_windows` (`utils.get_rolling_token_windows` + `utils.make_disjoint_window`).
* `resolve_max_length` (`models.utils.resolve_max_length`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.lm.batch_tokenize import BatchTokenizer

logger = logging.getLogger(__name__)

DEFAULT_MAX_LENGTH = 2048
# transformers' "no limit" sentinel for `model_max_length` (int(1e30)).
TOKENIZER_INFINITY = 1000000000000000019884624838656
_SEQLEN_CONFIG_ATTRS = ("n_positions", "max_position_embeddings", "n_ctx")

Tokens = list[int]


def resolve_max_length(
    config: Any, tokenizer: Any = None, *, default: int = DEFAULT_MAX_LENGTH
) -> int:
    """The model's context length, with lm-eval's precedence.

    The first non-None of `n_positions`, `max_position_embeddings`, `n_ctx` on `config.text_config`
    when the config has one (multimodal wrappers), else on `config`; then
    `tokenizer.model_max_length` unless it is the 1e30 "unset" sentinel; then `default`.

        LlamaConfig(max_position_embeddings=4096)            -> 4096
        GPT2Config(n_positions=1024, n_ctx=2048)             -> 1024   (n_positions comes first)
        config without any, tokenizer.model_max_length=512   -> 512
        config without any, model_max_length=int(1e30)       -> 2048
    """
    cfg = getattr(config, "text_config", None) or config
    for attr in _SEQLEN_CONFIG_ATTRS:
        value = getattr(cfg, attr, None)
        if value is not None:
            return int(value)
    model_max_length = getattr(tokenizer, "model_max_length", None)
    if model_max_length is not None and model_max_length != TOKENIZER_INFINITY:
        return int(model_max_length)
    return default


def resolve_prefix_token_id(tokenizer: Any, custom: int | None = None) -> int | None:
    """The token put before an empty context or a rolling document: custom, else BOS, else EOS;
    None for a tokenizer with neither (`Encoder.required_prefix_token_id` names it when needed)."""
    if custom is not None:
        return int(custom)
    if tokenizer.bos_token_id is not None:
        return int(tokenizer.bos_token_id)
    if tokenizer.eos_token_id is not None:
        return int(tokenizer.eos_token_id)
    return None


def move_trailing_whitespace(context: str, continuation: str) -> tuple[str, str]:
    """`("Answer: ", "Paris")` -> `("Answer:", " Paris")`: the context's trailing whitespace moves over."""
    n = len(context) - len(context.rstrip())
    if n > 0:
        return context[:-n], context[-n:] + continuation
    return context, continuation


@dataclasses.dataclass(frozen=True, kw_only=True)
class TruncatedRequest:
    """A loglikelihood request as the model sees it after lm-eval's left truncation.

    `context` is what precedes the continuation inside the model window (never empty), so the model
    input is `context + continuation[:-1]` (length <= max_length) and the scored tokens are
    `continuation`, each predicted from the position just before it.
    """

    context: tuple[int, ...]
    continuation: tuple[int, ...]
    truncated: int  # tokens dropped from the left of the context

    @property
    def input_len(self) -> int:
        return len(self.context) + len(self.continuation) - 1


def truncate_request(
    context: Sequence[int], continuation: Sequence[int], max_length: int
) -> TruncatedRequest:
    """lm-eval's causal left truncation, `inp = (ctx + cont)[-(max_length + 1):][:-1]`.

    With max_length=4, ctx=[1, 2, 3, 4, 5], cont=[6, 7]: lm-eval feeds [3, 4, 5, 6] and scores
    6 from the position of 5 and 7 from the position of 6, so the effective context is [3, 4, 5]:

        truncate_request([1, 2, 3, 4, 5], [6, 7], 4)
        -> TruncatedRequest(context=(3, 4, 5), continuation=(6, 7), truncated=2)

    The continuation is never cut: lm-eval asserts `0 < len(cont) <= max_length`, and so do we.
    """
    if not context:
        raise ValueError(
            "a loglikelihood request needs a non-empty context (see Encoder.encode_request)"
        )
    if not 0 < len(continuation) <= max_length:
        raise ValueError(
            f"continuation has {len(continuation)} tokens; lm-eval requires 0 < len <= max_length ({max_length})"
        )
    total = len(context) + len(continuation)
    keep = max(0, total - (max_length + 1))
    if keep > 0:
        logger.warning(
            "Combined length of context (%d) and continuation (%d) exceeds model's maximum length (%d). "
            "Truncating %d tokens from the left.",
            len(context),
            len(continuation),
            max_length,
            total - max_length + 1,
        )
    return TruncatedRequest(
        context=tuple(map(int, context[keep:])),
        continuation=tuple(map(int, continuation)),
        truncated=keep,
    )


def rolling_windows(
    tokens: Sequence[int], *, prefix_token: int, max_length: int
) -> list[tuple[Tokens, Tokens]]:
    """lm-eval's disjoint rolling windows (context_len=1) as `(context, continuation)` pairs.

    Every token is predicted exactly once. The first window is conditioned on `prefix_token`; each
    later one on the single token before it, except the last, partial window, which keeps a full
    `max_length` of context. With tokens [1..10], prefix 0, max_length 4:

        ([0], [1, 2, 3, 4])        input 0 1 2 3       scores 1 2 3 4
        ([4], [5, 6, 7, 8])        input 4 5 6 7       scores 5 6 7 8
        ([6, 7, 8], [9, 10])       input 6 7 8 9       scores 9 10

    With a BOS-adding tokenizer the document itself starts with BOS, and the prefix is BOS too, so
    lm-eval scores log P(BOS | BOS) in the first window; that quirk is kept on purpose.
    """
    tokens = [int(t) for t in tokens]
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    n = len(tokens)
    if n == 0:
        return []
    windows: list[tuple[Tokens, Tokens]] = []
    first = min(max_length, n)
    windows.append(([prefix_token] + tokens[: first - 1], tokens[:first]))
    predicted = first
    while predicted < n:
        pred_len = min(n - predicted, max_length)
        end = predicted + pred_len
        windows.append(
            (tokens[max(0, end - max_length - 1) : end - 1], tokens[end - pred_len : end])
        )
        predicted += pred_len
    # make_disjoint_window: drop the inputs that are also predicted.
    return [(ctx[: len(ctx) - (len(cont) - 1)], cont) for ctx, cont in windows]


class Encoder:
    """Encodes requests with an HF tokenizer the way `HFLM` does (causal backend).

    enc = Encoder(tokenizer)                       # llama-style tokenizer, BOS id 1
    enc.tok_encode("Paris")                        -> [1, 4392]
    enc.encode_pair("Capital: ", "Paris")          -> ([1, 913, 28], [4392])   (" Paris" moved over)
    enc.encode_request("", " Paris")               -> ([1], [4392])            (prefix token as context)
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        add_bos_token: bool | None = None,
        prefix_token_id: int | None = None,
    ):
        self.tokenizer = tokenizer
        self.batch = BatchTokenizer(tokenizer)
        self.add_bos_token = add_bos_token
        self.prefix_token_id = resolve_prefix_token_id(tokenizer, prefix_token_id)
        self._prefix_str = (
            tokenizer.decode(self.prefix_token_id) if self.prefix_token_id is not None else ""
        )

    @property
    def required_prefix_token_id(self) -> int:
        """`prefix_token_id` for a request that needs it (an empty context, a rolling window); a
        tokenizer with no BOS, no EOS and no `prefix_token_id` given is a `JaxevalError`."""
        if self.prefix_token_id is None:
            raise JaxevalError(
                "an empty context or a rolling-loglikelihood window needs a prefix token, and the "
                "tokenizer has no BOS or EOS token",
                field="prefix_token_id",
                hint="pass prefix_token_id=<a token id> in --model_args",
            )
        return self.prefix_token_id

    def _special_kwargs(self, string: str, add_special_tokens: bool | None) -> dict[str, bool]:
        if add_special_tokens is not None:
            kwargs = {"add_special_tokens": add_special_tokens}
        elif self.add_bos_token is not None:
            kwargs = {"add_special_tokens": self.add_bos_token}
        else:
            kwargs = {}
        if add_special_tokens is None and self._prefix_str and string.startswith(self._prefix_str):
            kwargs["add_special_tokens"] = False
        return kwargs

    def tok_encode(
        self,
        string: str,
        add_special_tokens: bool | None = None,
        left_truncate_len: int | None = None,
    ) -> Tokens:
        """`HFLM.tok_encode`: one string -> token ids, with the BOS rules above."""
        ids = list(
            self.tokenizer.encode(string, **self._special_kwargs(string, add_special_tokens))
        )
        if left_truncate_len:
            ids = ids[-left_truncate_len:]
        return ids

    def tok_encode_many(
        self, strings: Sequence[str], add_special_tokens: bool | None = None
    ) -> list[Tokens]:
        """`tok_encode` over many strings, batched through the fast tokenizer per distinct kwargs."""
        out: list[Tokens | None] = [None] * len(strings)
        groups: dict[tuple, list[int]] = {}
        for i, s in enumerate(strings):
            groups.setdefault(
                tuple(sorted(self._special_kwargs(s, add_special_tokens).items())), []
            ).append(i)
        for key, idx in groups.items():
            distinct = list(dict.fromkeys(strings[i] for i in idx))  # MC contexts repeat per choice
            encoded = self.batch(distinct, **dict(key))
            by_string = dict(zip(distinct, encoded))
            for i in idx:
                out[i] = list(by_string[strings[i]])
        return out  # type: ignore[return-value]

    def encode_pair(self, context: str, continuation: str) -> tuple[Tokens, Tokens]:
        """`TemplateLM._encode_pair` for a non-empty context (causal backend)."""
        if not context:
            raise ValueError("encode_pair needs a non-empty context; use encode_request")
        context, continuation = move_trailing_whitespace(context, continuation)
        whole = self.tok_encode(context + continuation)
        ctx = self.tok_encode(context)
        return ctx, whole[len(ctx) :]

    def encode_request(self, context: str, continuation: str) -> tuple[Tokens, Tokens]:
        """One `(context, continuation)` request -> `(ctx_enc, cont_enc)`, empty context included."""
        if context == "":
            cont = self.tok_encode(continuation, add_special_tokens=False)
            prefix = self.required_prefix_token_id
            if cont and cont[0] == prefix:
                return cont[:1], cont[1:]
            return [prefix], cont
        return self.encode_pair(context, continuation)

    def encode_requests(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[Tokens, Tokens]]:
        """`encode_request` over many pairs; the three tokenizer calls per pair are batched."""
        out: list[tuple[Tokens, Tokens] | None] = [None] * len(pairs)
        empty = [i for i, (c, _) in enumerate(pairs) if c == ""]
        full = [i for i, (c, _) in enumerate(pairs) if c != ""]
        if empty:
            prefix = self.required_prefix_token_id
            conts = self.tok_encode_many([pairs[i][1] for i in empty], add_special_tokens=False)
            for i, cont in zip(empty, conts):
                out[i] = (cont[:1], cont[1:]) if cont and cont[0] == prefix else ([prefix], cont)
        if full:
            moved = [move_trailing_whitespace(*pairs[i]) for i in full]
            wholes = self.tok_encode_many([c + x for c, x in moved])
            ctxs = self.tok_encode_many([c for c, _ in moved])
            for i, whole, ctx in zip(full, wholes, ctxs):
                out[i] = (ctx, whole[len(ctx) :])
        return out  # type: ignore[return-value]

    def rolling_requests(self, text: str, max_length: int) -> list[tuple[Tokens, Tokens]]:
        """`HFLM.loglikelihood_rolling`'s windows for one document, as `(context, continuation)` pairs."""
        return rolling_windows(
            self.tok_encode(text), prefix_token=self.required_prefix_token_id, max_length=max_length
        )
