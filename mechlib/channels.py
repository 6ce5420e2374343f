"""Heads as channels: the convolutional reading of "concat → project = Σ per-part projections".

A layer's attention output is the concatenation of its heads' z projected by W_O, which equals the sum over heads of
each head's z projected by its own rows of W_O (``attention.concat_then_project`` and ``per_head_results``). A
convolution is the same sum over its input channels: with weight W [C_out C_in kH kW] and bias b,

    conv(x) = b + Σ_c W[:, c:c+1] ⋆ x[:, c:c+1]

each term a one-channel convolution with the weight sliced on its input-channel axis, the bias added once. So an input
channel is to a convolution what a head is to the output projection: a part whose contribution can be read alone.
``channels`` checks the identity on a ``torch.nn.Conv2d`` in float32 and float64.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mechlib.checks import Check, compare, tolerance_for
from mechlib.device import costs

__all__ = ["DTYPES", "per_channel", "Channels", "channels_mb", "channels"]

DTYPES = (torch.float32, torch.float64)


def per_channel(conv: nn.Conv2d, x: Tensor) -> Tensor:
    """Each input channel's one-channel convolution, no bias: [C_in batch C_out H' W'] from x [batch C_in H W]."""
    return torch.stack([F.conv2d(x[:, c:c + 1], conv.weight[:, c:c + 1], None, conv.stride, conv.padding,
                                 conv.dilation) for c in range(conv.in_channels)])


@dataclass(frozen=True)
class Channels:
    """A convolution against the sum of its input channels' one-channel convolutions, in each precision."""

    in_channels: int
    out_channels: int
    kernel: int
    size: int                       # the input's height and width
    max_abs_diff: dict[str, float]  # "float32", "float64" -> max |conv(x) − (b + Σ_c W[:, c] ⋆ x_c)|
    checks: dict[str, Check]        # the same, against each precision's tolerance

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks.values())


def channels_mb(in_channels: int = 3, out_channels: int = 4, kernel: int = 3, size: int = 8, batch: int = 2,
                seed: int = 0) -> float:
    """What ``channels`` holds, in MB: the input, the output and each channel's term, in float64."""
    return 8 * batch * (in_channels + (in_channels + 2) * out_channels) * size**2 / 1e6


@costs(channels_mb, "a convolution summed over its input channels")
@torch.inference_mode()
def channels(in_channels: int = 3, out_channels: int = 4, kernel: int = 3, size: int = 8, batch: int = 2,
             seed: int = 0) -> Channels:
    """A ``torch.nn.Conv2d`` (padding keeps the size) with weights, bias and input drawn from ``seed``, against
    b + Σ_c W[:, c:c+1] ⋆ x[:, c:c+1], in float32 and float64."""
    diffs, checks = {}, {}
    for dtype in DTYPES:
        generator = torch.Generator().manual_seed(seed)
        conv = nn.Conv2d(in_channels, out_channels, kernel, padding=kernel // 2, device="meta", dtype=dtype).to_empty(
            device="cpu")  # built without its own initialisation, which would draw from torch's global generator,
        # shared with every session's thread (token_attribution's seeded Captum calls read it under their lock)
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=generator, dtype=dtype) / (in_channels * kernel**2)**0.5)
        conv.bias.copy_(torch.randn(out_channels, generator=generator, dtype=dtype))
        x = torch.randn(batch, in_channels, size, size, generator=generator, dtype=dtype)  # [batch C_in H W]
        summed = per_channel(conv, x).sum(0) + conv.bias[:, None, None]                    # [batch C_out H W]
        name = str(dtype).removeprefix("torch.")
        checks[name] = compare(summed, conv(x), tolerance_for(dtype))
        diffs[name] = checks[name].max_abs_diff
    return Channels(in_channels, out_channels, kernel, size, diffs, checks)
