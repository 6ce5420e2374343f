"""Experiments that train run in a process of their own (``classroom.training.apart``): the server's ``compute``
sends them there, their results are the ones the server's own process computes, their errors come back, and a
killed worker is replaced."""

import os
import signal

import numpy as np
import pytest

from classroom import experiments
from classroom.training import apart
from mechlib import superposition
from mechlib.device import costs


@costs(lambda x: 1.0, "where it runs", trains=True)
def where(x: int) -> int:
    """A stand-in experiment that trains: the id of the process it runs in."""
    return os.getpid()


@costs(lambda x: 1.0, "where it runs")
def where_plain(x: int) -> int:
    """The same, declared without ``trains``."""
    return os.getpid()


def test_compute_sends_an_experiment_that_trains_to_the_worker_and_others_not():
    experiments._cached.clear()
    worker = experiments.compute(where, 1)
    assert worker != os.getpid() and apart.run(os.getpid, ()) == worker  # one worker, kept
    assert experiments.compute(where_plain, 1) == os.getpid()


def test_a_toy_trained_apart_is_the_toy_trained_here():
    args = (5, 2, 0.9, 1.0, 3, 40)  # n_features, n_hidden, sparsity, importance decay, seed, steps
    here, there = superposition.train_toy(*args), apart.run(superposition.train_toy, args)
    assert np.array_equal(here.W, there.W) and np.array_equal(here.b, there.b)


def test_its_error_comes_back_and_a_killed_worker_is_replaced():
    with pytest.raises(ValueError, match="invalid literal"):
        apart.run(int, ("seven",))
    os.kill(apart.run(os.getpid, ()), signal.SIGKILL)
    with pytest.raises(RuntimeError, match="stopped unexpectedly"):
        apart.run(os.getpid, ())
    assert apart.run(int, ("7",)) == 7
