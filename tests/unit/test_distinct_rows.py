"""The rows a read returned, per venue, counted exactly with flat memory (stream/deletions.py)."""

from __future__ import annotations

from tap_guestdata.http.paging import PAGES_REMEMBERED, PER_PAGE, NewestFirstPages
from tap_guestdata.stream.deletions import DistinctRows


def drifting_pages(total: int, added_before_each_page: int) -> list[list[int]]:
    """A newest-first listing of ids total-1..0 read page by page while rows are added at its
    head: each page starts with rows the previous one already gave (spec 4.2)."""
    pages, offset = [], 0
    while offset < total:
        start = max(0, offset - added_before_each_page)
        pages.append(list(range(start, min(start + PER_PAGE, total))))
        offset = start + PER_PAGE
    return pages


def test_rows_given_twice_across_page_boundaries_count_once() -> None:
    counter = DistinctRows()
    for page in drifting_pages(total=50_000, added_before_each_page=37):
        for row_id in page:
            counter.add(row_id % 3, row_id)  # three venues
    assert sum(counter.by_venue.values()) == 50_000
    assert counter.by_venue == {0: 16_667, 1: 16_667, 2: 16_666}


def test_memory_is_bounded_by_the_pages_remembered_not_the_rows_read() -> None:
    counter = DistinctRows()
    most_held = 0
    for row_id in range(200_000):
        counter.add(1, row_id)
        most_held = max(most_held, counter.held())
    assert counter.by_venue == {1: 200_000}
    assert most_held == PAGES_REMEMBERED * PER_PAGE


def test_the_same_id_in_two_venues_counts_in_each() -> None:
    counter = DistinctRows()
    counter.add("a", 7)
    counter.add("b", 7)
    counter.add("a", 7)
    assert counter.by_venue == {"a": 1, "b": 1}


def test_it_remembers_as_far_back_as_the_page_guard() -> None:
    guard = NewestFirstPages()
    assert guard._pages.maxlen == PAGES_REMEMBERED
    assert DistinctRows().remembered == PAGES_REMEMBERED * PER_PAGE
