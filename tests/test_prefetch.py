"""``read_ahead``: the items in order, an error raised where the iterable raised it, and a caller that
stops early stops the worker thread."""

from __future__ import annotations

import threading

import pytest

from deer.base.prefetch import read_ahead


def test_items_come_in_order_and_are_made_on_another_thread():
    makers = []

    def items():
        for i in range(50):
            makers.append(threading.current_thread().name)
            yield i

    assert list(read_ahead(items(), depth=2)) == list(range(50))
    assert set(makers) == {"read-ahead"}


def test_an_error_is_raised_after_the_items_before_it():
    def items():
        yield 1
        yield 2
        raise OSError("disk gone")

    seen = []
    with pytest.raises(OSError, match="disk gone"):
        for item in read_ahead(items()):
            seen.append(item)
    assert seen == [1, 2]


def test_stopping_early_stops_the_worker():
    made = []

    def items():
        for i in range(1000):
            made.append(i)
            yield i

    before = threading.active_count()
    ahead = read_ahead(items())
    assert next(ahead) == 0
    ahead.close()  # joins the worker
    assert threading.active_count() == before
    assert len(made) <= 3  # the one taken, one waiting, and at most one being made when it stopped
