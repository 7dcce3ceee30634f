"""`task_label`: how the cluster's tools name a task instance from Airflow's REST answer."""

from guestdata_cluster import task_key, task_label


def test_an_account_s_mapped_task_is_named_by_its_rendered_label() -> None:
    task = {"task_id": "accounts.load", "map_index": 1, "rendered_map_index": "harbour"}
    assert task_label(task) == "harbour.load"


def test_a_retry_not_yet_rendered_is_named_by_task_id_and_map_index() -> None:
    # Airflow clears a retry's rendered label and reports its map index in its place.
    queued = {"task_id": "accounts.load", "map_index": 1, "rendered_map_index": "1"}
    other = {"task_id": "large.load", "map_index": 1, "rendered_map_index": None}
    assert task_label(queued) == "accounts.load[1]"
    assert task_label(other) == "large.load[1]"


def test_an_unmapped_task_is_its_task_id() -> None:
    assert task_label({"task_id": "refresh", "map_index": -1}) == "refresh"


def test_task_key_names_every_try_alike_rendered_or_not() -> None:
    running = {"task_id": "accounts.load", "map_index": 1, "rendered_map_index": "harbour"}
    queued_retry = {**running, "rendered_map_index": "1"}
    assert task_key(running) == task_key(queued_retry) == "accounts.load[1]"
