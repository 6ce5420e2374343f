"""The bounded map under the zoo's shared models and the store's checkpoints: which entry goes, and when."""

import math
import threading
import time

from mechlib.bounded import Bounded


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_least_recently_used_goes_past_the_count_and_a_get_renews():
    kept = Bounded(max_count=lambda: 2)
    kept.put("a", 1)
    kept.put("b", 2)
    assert kept.get("a") == 1          # now b is the least recently used
    kept.put("c", 3)
    assert kept.keys() == ["a", "c"] and kept.get("b") is None


def test_the_size_bound_keeps_the_newest_even_alone_above_it():
    kept = Bounded(max_size=lambda: 10, size=len)
    kept.put("a", "x" * 6)
    kept.put("b", "x" * 6)             # 12 > 10: a goes
    assert kept.keys() == ["b"]
    kept.put("c", "x" * 30)            # alone above the bound, the entry just put stays
    assert kept.keys() == ["c"]


def test_a_group_past_its_bound_loses_its_own_oldest_not_another_groups():
    kept = Bounded(per_group=lambda group: 2)
    for key, group in [("a1", "a"), ("b1", "b"), ("a2", "a"), ("a3", "a")]:
        kept.put(key, key, group)
    assert kept.keys() == ["b1", "a2", "a3"]


def test_the_first_value_and_group_put_under_a_key_stay():
    kept = Bounded(per_group=lambda group: 1)
    assert kept.put("k", "first", "owner 1") == "first"
    assert kept.put("k", "second", "owner 2") == "first"
    kept.put("other", "x", "owner 2")  # owner 2's first: k is still owner 1's
    assert kept.keys() == ["k", "other"]


def test_an_entry_expires_its_lifetime_after_its_last_use_and_a_pinned_one_never():
    clock = Clock()
    kept = Bounded(ttl_s=lambda group: 100, max_count=lambda: 1, max_pinned=lambda holder: 1, clock=clock)
    kept.put("pinned", 0)
    assert kept.pin("pinned") and not kept.pin("nothing here")
    kept.put("a", 1)                   # the pinned entry counts toward no bound
    clock.now = 90
    assert kept.get("a") == 1
    clock.now = 150                    # a was last used at 90
    assert kept.get("a") == 1
    clock.now = 251
    assert kept.get("a") is None and kept.get("pinned") == 0 and len(kept) == 1


def test_past_its_pins_the_one_pinned_longest_ago_is_unpinned():
    kept = Bounded(max_count=lambda: 0, max_pinned=lambda holder: 2)
    for key in "abc":
        kept.put(key, key)
        kept.pin(key)
    assert [kept.pinned(key) for key in "abc"] == [False, True, True]
    kept.put("d", "d")                 # a, unpinned, now counts against a bound of 0 and goes
    assert kept.keys() == ["b", "c", "d"]


def test_each_holder_pins_within_its_own_bound_and_never_unpins_anothers():
    kept = Bounded(max_pinned=lambda holder: 8 if holder == "teacher" else 1)
    kept.put("lesson", 0)
    kept.pin("lesson", "teacher")
    for key in "abcdefghij":  # a student's presets, pinned one after another
        kept.put(key, key)
        kept.pin(key, "student")
    assert kept.pinned("lesson") and kept.pinned("j") and not any(kept.pinned(key) for key in "abcdefghi")


def test_concurrent_first_requests_build_once_and_a_failed_build_leaves_nothing():
    kept, builds = Bounded(), []

    def build() -> str:
        builds.append(1)
        time.sleep(0.2)
        return "model"

    threads = [threading.Thread(target=kept.get_or_build, args=("k", build)) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert builds == [1] and kept.get("k") == "model"

    def fail() -> str:
        raise ValueError("a bad upload")

    for _ in range(2):
        try:
            kept.get_or_build("bad", fail)
        except ValueError:
            pass
    assert kept.keys() == ["k"] and kept._building == {}


def test_a_groups_lifetime_applies_to_its_own_and_a_sweep_applies_it_unasked():
    clock = Clock()
    kept = Bounded(ttl_s=lambda group: 120 if group == "upload" else math.inf, clock=clock)
    kept.put("uploaded", 1, "upload")
    kept.put("zoo", 2, "zoo")
    clock.now = 121
    kept.sweep()  # nobody asked for anything: the idle upload goes all the same
    assert kept.keys() == ["zoo"]
