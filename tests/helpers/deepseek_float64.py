"""transformers' DeepSeek-V3 in float64 throughout: the reference that decides float32 routing ties.

    model = float64_deepseek_v3(path)                    # float64 weights, float64 arithmetic
    logprobs, router_logits, experts = token_scores(model, tokens)

`from_pretrained(dtype=float64)` alone still computes three things in float32: the RMSNorm, the RoPE
tables and the router's logits (`DeepseekV3TopkRouter` casts its input and weight to float32).
`float64_deepseek_v3` swaps those modules' forwards, on that one model instance only, for the same
formulas in float64; attention is SDPA (which keeps its inputs' dtype) and the experts run eagerly
(`grouped_mm` takes no float64).
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np


def _norm(self, x):
    import torch

    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def _rope(self, x, position_ids):
    import torch

    dim = 2 * self.inv_freq.shape[0]
    theta = self.config.rope_parameters["rope_theta"]
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    freqs = position_ids[..., None].double() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _router(self, hidden_states):
    """`DeepseekV3TopkRouter.forward` without its float32 casts (the same steps, in float64)."""
    import torch
    import torch.nn.functional as F

    logits = F.linear(hidden_states.view(-1, self.hidden_dim), self.weight)
    scores = logits.sigmoid()
    choice = scores + self.e_score_correction_bias
    per_group = self.num_experts // self.num_group
    group_scores = choice.view(-1, self.num_group, per_group).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    keep = group_mask.unsqueeze(-1).expand(-1, self.num_group, per_group).reshape(choice.shape)
    choice = choice.masked_fill(~keep.bool(), float("-inf"))
    experts = torch.topk(choice, k=self.top_k, dim=-1, sorted=False)[1]
    weights = scores.gather(1, experts)
    if self.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return logits, weights * self.routed_scaling_factor, experts


def float64_deepseek_v3(path: str) -> Any:
    """The checkpoint at `path` as transformers' DeepSeek-V3, every step in float64 (eval mode)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float64, attn_implementation="sdpa", experts_implementation="eager"
    )
    model = model.eval().double()  # the router's weight and bias are declared float32
    for module in model.modules():
        name = type(module).__name__
        if name == "DeepseekV3RMSNorm":
            module.forward = types.MethodType(_norm, module)
        elif name == "DeepseekV3RotaryEmbedding":
            module.forward = types.MethodType(_rope, module)
        elif name == "DeepseekV3TopkRouter":
            module.forward = types.MethodType(_router, module)
    return model


def token_scores(model: Any, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One row of tokens [T] through a transformers DeepSeek-V3 (any dtype): the log-probability of
    each next token [T - 1] (float64 log-softmax of the model's logits), and the last MoE layer's
    router logits [T, X] and chosen experts, sorted [T, K]."""
    import torch

    seen = []
    gate = model.model.layers[-1].mlp.gate
    hook = gate.register_forward_hook(lambda m, i, out: seen.append((out[0], out[2])))
    try:
        with torch.no_grad():
            logits = model(torch.as_tensor(tokens[None], dtype=torch.long)).logits[0].double()
    finally:
        hook.remove()
    logp = torch.log_softmax(logits[:-1], dim=-1)
    picked = logp.gather(1, torch.as_tensor(tokens[1:, None], dtype=torch.long))[:, 0]
    router, experts = seen[-1]
    return picked.numpy(), router.double().numpy(), np.sort(experts.numpy(), axis=1)
