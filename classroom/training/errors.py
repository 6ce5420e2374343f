"""What a training raises, on either backend: ``SessionBusy`` on the page's side, ``Cancelled`` in its worker."""

__all__ = ["SessionBusy", "Cancelled"]


class SessionBusy(Exception):
    """A session asked for a second training while its first still runs or waits (``claim.one_per_session``)."""


class Cancelled(Exception):
    """The page left: the worker stopped training at a step boundary (``body.run_training``)."""
