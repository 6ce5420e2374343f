"""mechlib.channels: a convolution is the sum of its input channels' one-channel convolutions, the bias once, in
float32 and float64; the sum without the bias, or with it once per channel, is not."""

import pytest
import torch
from torch import nn

from mechlib import channels
from mechlib.checks import TOLERANCE, compare
from mechlib.device import experiment_mb


@pytest.mark.parametrize("sizes", [(3, 4, 3, 8), (1, 2, 1, 5), (16, 8, 5, 32)])
def test_a_convolution_is_the_sum_over_its_input_channels(sizes):
    result = channels.channels(*sizes)
    assert result.passed and set(result.checks) == set(TOLERANCE) == {"float32", "float64"}
    assert result.max_abs_diff["float64"] < 1e-12 and result.max_abs_diff["float32"] < 1e-5
    assert result.checks["float64"].tolerance == 1e-10 and result.checks["float32"].tolerance == 1e-5
    assert (result.in_channels, result.out_channels, result.kernel, result.size) == sizes


@torch.inference_mode()
def test_the_bias_is_added_once_and_strides_and_dilations_slice_the_same_way():
    generator = torch.Generator().manual_seed(1)
    conv = nn.Conv2d(3, 2, 3, stride=2, padding=2, dilation=2).double()
    x = torch.randn(2, 3, 9, 9, generator=generator, dtype=torch.float64)
    terms = channels.per_channel(conv, x)                                        # [C_in batch C_out H' W']
    assert terms.shape == (3, *conv(x).shape)
    assert compare(terms.sum(0) + conv.bias[:, None, None], conv(x), 1e-10).passed
    assert not compare(terms.sum(0), conv(x), 1e-3).passed                       # no bias
    assert not compare(terms.sum(0) + 3 * conv.bias[:, None, None], conv(x), 1e-3).passed  # a bias per channel


def test_it_declares_its_memory_and_leaves_torchs_generator_as_it_was():
    state = torch.random.get_rng_state()
    assert channels.channels(seed=3).max_abs_diff == channels.channels(seed=3).max_abs_diff
    assert torch.equal(torch.random.get_rng_state(), state)
    assert 0 < experiment_mb(channels.channels) < 1 and experiment_mb(channels.channels, 16, 8, 5, 32) > experiment_mb(
        channels.channels)
