"""What every model does when it is shared between sessions, whatever its architecture.

The zoo (``mechlib.zoo``) gives the same object to every session, so it makes that object read-only with
``share()``: then ``.train()``, ``requires_grad_(True)`` and ``load_state_dict`` raise, with a message
that says what to do instead. ``copy.deepcopy`` gives the student's own model: independent weights,
writable and trainable, whatever the original was. ``Transformer`` and ``LSTM`` both inherit this.
"""

import copy
from typing import Self

from torch import nn

__all__ = ["Shareable"]


class Shareable(nn.Module):
    """An ``nn.Module`` that can be shared read-only and copied into a writable one."""

    def __init__(self) -> None:
        super().__init__()
        self.read_only = False

    def share(self) -> Self:
        """Make this the shared model: eval mode, no gradients, and every mutation above refused."""
        self.eval().requires_grad_(False)
        self.read_only = True
        return self

    def _refuse_if_shared(self, what: str) -> None:
        if self.read_only:
            raise RuntimeError(f"this model is shared read-only between sessions, so {what} is refused; "
                               "work on a copy: copy.deepcopy(model) is an independent, trainable model")

    def train(self, mode: bool = True) -> Self:
        if mode:
            self._refuse_if_shared(".train()")
        return super().train(mode)

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        if requires_grad:
            self._refuse_if_shared("requires_grad_(True)")
        return super().requires_grad_(requires_grad)

    def load_state_dict(self, *args, **kwargs):
        self._refuse_if_shared("load_state_dict")
        return super().load_state_dict(*args, **kwargs)

    def __deepcopy__(self, memo: dict) -> Self:
        """A copy is the student's own: writable and trainable, whatever the original was."""
        own = type(self).__new__(type(self))
        memo[id(self)] = own
        own.__dict__.update({k: copy.deepcopy(v, memo) for k, v in self.__dict__.items()})
        own.read_only = False
        return own.requires_grad_(True)
