"""Next-token loss, the one measure of how well a language model predicts: per position, or on held-out text.

Position p predicts token p + 1, so a sequence of n tokens has n − 1 losses, each −log P(token_{p+1}),
in nats.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mechlib.data import TextData, builtin_text

__all__ = ["next_token_loss", "HELDOUT_BATCH", "heldout_loss"]


def next_token_loss(logits: Tensor, tokens: Tensor, reduction: str = "mean", mask: Tensor | None = None) -> Tensor:
    """Cross-entropy (nats) of predicting tokens[:, p + 1] from logits[:, p].

    logits [batch pos d_vocab], tokens [batch pos]; "mean" gives a scalar (over the positions where
    ``mask`` [batch pos − 1] is True, when given), "none" the losses [batch pos − 1].
    """
    if mask is not None:
        return next_token_loss(logits, tokens, "none")[mask.to(logits.device)].mean()
    losses = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten().to(logits.device),
                             reduction=reduction)
    return losses.view(tokens.shape[0], -1) if reduction == "none" else losses


HELDOUT_BATCH = 32  # windows of held-out text per batch


@torch.inference_mode()
def heldout_loss(model: nn.Module, batches: int = 8, batch_size: int = HELDOUT_BATCH) -> float:
    """Mean next-token loss (nats) on held-out built-in text, in fixed windows of the model's context."""
    stream = TextData(torch.tensor(model.tokenizer.encode(builtin_text("heldout"))))
    generator, device = torch.Generator().manual_seed(4321), next(model.parameters()).device
    losses = [float(next_token_loss(model(tokens := stream.batch(generator, batch_size, model.cfg.n_ctx).to(device)), tokens))
              for _ in range(batches)]
    return sum(losses) / len(losses)
