"""Tests for ``dashrepro.objectives.divergences``: the teacher's top-k tokens plus one tail bucket
(Table ``tab:vocabulary_support``) are distributions over k + 1 outcomes."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from objectives_helpers import SETTINGS, _logits

from dashrepro import objectives as obj


@SETTINGS
@given(seed=st.integers(0, 10_000), V=st.integers(3, 30), data=st.data())
def test_topk_tail_distributions_sum_to_one(seed, V, data):
    k = data.draw(st.integers(1, V - 1))
    s, t = _logits(2, 3, V, seed)
    ls, lt = obj.topk_tail_logprobs(s, t, k)
    assert ls.shape == (2, 3, k + 1) and lt.shape == (2, 3, k + 1)
    torch.testing.assert_close(ls.exp().sum(-1), torch.ones(2, 3), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lt.exp().sum(-1), torch.ones(2, 3), rtol=1e-5, atol=1e-5)
    idx = t.topk(k, -1).indices  # the teacher's top-k tokens head the support
    torch.testing.assert_close(ls[..., :k], F.log_softmax(s, -1).gather(-1, idx), atol=1e-5, rtol=0)
    torch.testing.assert_close(lt[..., :k], F.log_softmax(t, -1).gather(-1, idx), atol=1e-5, rtol=0)
    assert torch.all(lt[..., :k].min(-1).values >= lt[..., k] - math.log(V))
