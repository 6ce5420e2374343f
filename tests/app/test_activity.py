"""A training's threads follow the class: every core while no other session runs a script, one beside a class."""

import types

import pytest
import torch

from classroom import activity


@pytest.fixture(autouse=True)
def quiet_server(monkeypatch):
    monkeypatch.setattr(activity, "_last_run", {})
    monkeypatch.setattr(activity, "QUEUE", types.SimpleNamespace(running=1))  # this training's own slot


def test_a_training_alone_gets_every_core_its_own_session_running_or_not():
    activity.run_started("trainer")
    assert activity.training_threads("trainer") == torch.get_num_threads()


def test_another_session_running_or_just_finished_leaves_it_one(monkeypatch):
    activity.run_started("student")
    assert activity.training_threads("trainer") == 1
    activity.run_ended("student")
    assert activity.training_threads("trainer") == 1  # it may move again any moment
    monkeypatch.setattr(activity, "QUIET_S", 0.0)
    assert activity.training_threads("trainer") == torch.get_num_threads()


def test_sessions_quiet_long_enough_are_forgotten(monkeypatch):
    monkeypatch.setattr(activity, "QUIET_S", 0.0)
    for session in ("a", "b", "c"):
        activity.run_started(session)
        activity.run_ended(session)
    assert set(activity._last_run) <= {"c"}  # each ending drops those quiet for longer than QUIET_S


def test_two_trainings_at_once_get_one_thread_each():
    activity.QUEUE.running = 2
    assert activity.training_threads("trainer") == 1
