"""`ParamInfo`: one parameter leaf's global shape and logical axes (the parameter layouts'
building block, shared by `params`, `moe` and `mla`)."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParamInfo:
    """One leaf: its global shape and one logical axis name per dimension (see `sharding.py`)."""

    shape: tuple[int, ...]
    axes: tuple[str, ...]

    def __post_init__(self):
        if len(self.shape) != len(self.axes):
            raise ValueError(f"shape {self.shape} and axes {self.axes} differ in rank")


def is_info(x: Any) -> bool:
    return isinstance(x, ParamInfo)
