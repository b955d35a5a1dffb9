"""objectives.masks: the masked mean and the mask checks every objective shares."""

from __future__ import annotations

import pytest
import torch

from dashrepro.objectives.masks import _check_rollout_mask, masked_mean


def test_the_masked_mean_leaves_out_masked_positions_even_non_finite_ones():
    x = torch.tensor([[1.0, 2.0, float("nan")], [4.0, float("inf"), 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    assert masked_mean(x, mask).item() == pytest.approx((1 + 2 + 4 + 6) / 4)
    assert masked_mean(x, mask, dim=1).tolist() == pytest.approx([1.5, 5.0])
    assert masked_mean(x, mask, dim=1, keepdim=True).shape == (2, 1)
    # A row with no real token has mean 0, not NaN.
    assert masked_mean(x, torch.zeros(2, 3), dim=1).tolist() == [0.0, 0.0]


def test_a_mask_of_the_wrong_shape_or_with_holes_is_named():
    with pytest.raises(ValueError, match=r"mask has shape \(2, 2\), expected \(2, 3\)"):
        masked_mean(torch.zeros(2, 3), torch.ones(2, 2))
    with pytest.raises(ValueError, match="one contiguous run"):
        _check_rollout_mask(torch.tensor([[1, 0, 1]]))
    left_padded = torch.tensor([[0, 1, 1], [1, 1, 1]])
    assert _check_rollout_mask(left_padded).dtype == torch.bool
