"""Mask and shape checks shared by every objective, and the masked mean.

``mask`` is ``[B, T]`` with 1 (or True) for real generated tokens (EOS included) and 0 for
padding. Aggregations and the GRPO advantage recursion further require each rollout's real
tokens to be one contiguous run (right or left padding); holes raise ``ValueError``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _as_bool_mask(mask: Tensor, shape: torch.Size) -> Tensor:
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"mask has shape {tuple(mask.shape)}, expected {tuple(shape)}")
    return mask if mask.dtype == torch.bool else mask != 0


def _check_pair(student: Tensor, teacher: Tensor, mask: Tensor) -> Tensor:
    if student.dim() != 3 or student.shape != teacher.shape:
        raise ValueError(
            "student and teacher tensors must both be [B, T, D]; got "
            f"{tuple(student.shape)} and {tuple(teacher.shape)}"
        )
    return _as_bool_mask(mask, student.shape[:2])


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is nonzero (0 where there are none).

    Masked positions are excluded with ``where``, so non-finite values there do not leak.
    """
    mask = _as_bool_mask(mask, x.shape)
    xs = torch.where(mask, x, torch.zeros_like(x))
    if dim is None:
        return xs.sum() / mask.sum().clamp(min=1)
    return xs.sum(dim, keepdim=keepdim) / mask.sum(dim, keepdim=keepdim).clamp(min=1)


def _check_rollout_mask(mask: Tensor) -> Tensor:
    """[B, T] bool mask whose real tokens form one contiguous run per rollout."""
    if mask.dim() != 2:
        raise ValueError(f"mask must be [B, T], got {tuple(mask.shape)}")
    mask = mask if mask.dtype == torch.bool else mask != 0
    starts = mask[:, :1].long().sum(1) + (mask[:, 1:] & ~mask[:, :-1]).long().sum(1)
    if bool((starts > 1).any()):
        raise ValueError(
            "each rollout's real tokens must be one contiguous run (right padding); "
            "found a mask with holes"
        )
    return mask
