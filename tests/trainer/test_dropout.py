"""The models' dropout (``graphprep.trainer.models.common.fast_dropout``) draws its mask with
``torch.rand``, not torch's per-entry Bernoulli kernel: it must be dropout all the same."""

import pytest
import torch

from graphprep.trainer.models.common import Dropout, fast_dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.6])
def test_keeps_each_entry_with_probability_1_minus_p_and_scales_it(p):
    torch.manual_seed(0)
    x = torch.rand(400, 500) + 1          # no zeros: a zero out is a dropped entry
    out = fast_dropout(x, p)
    kept = out != 0
    # 2*10^5 entries: the kept share's standard deviation is below 0.0012
    assert kept.float().mean().item() == pytest.approx(1 - p, abs=0.006)
    assert torch.allclose(out[kept], x[kept] / (1 - p))
    # every row and column loses some and keeps some: the mask is per entry, not per row
    assert kept.any(1).all() and (~kept).any(1).all() and kept.any(0).all()


def test_gradient_flows_through_kept_entries_only_scaled():
    torch.manual_seed(1)
    x = (torch.rand(50, 40) + 1).requires_grad_()
    out = fast_dropout(x, 0.5)
    out.sum().backward()
    assert torch.equal(x.grad, (out != 0).float() * 2)


def test_identity_in_eval_or_at_p_0_and_zeros_at_p_1():
    x = torch.rand(20, 30) + 1
    assert fast_dropout(x, 0.5, training=False) is x and fast_dropout(x, 0.0) is x
    assert torch.equal(fast_dropout(x, 1.0), torch.zeros_like(x))


def test_the_module_is_torchs_to_a_checkpoint_and_follows_the_seed():
    drop = Dropout(0.3)
    assert isinstance(drop, torch.nn.Dropout) and drop.p == 0.3 and drop.state_dict() == {}
    x = torch.rand(30, 30) + 1
    torch.manual_seed(5)
    first = drop(x)
    torch.manual_seed(5)
    assert torch.equal(drop(x), first)
    assert torch.equal(drop.eval()(x), x)
