from app.domain.assignor import range_assign


def test_partitions_split_in_contiguous_ranges_in_member_order() -> None:
    got = range_assign({"b": ["t"], "a": ["t"]}, {"t": 5})
    assert got == {"a": [("t", 0), ("t", 1), ("t", 2)], "b": [("t", 3), ("t", 4)]}


def test_each_topic_is_assigned_only_to_its_subscribers() -> None:
    got = range_assign({"a": ["t", "u"], "b": ["u"]}, {"t": 2, "u": 2})
    assert got == {"a": [("t", 0), ("t", 1), ("u", 0)], "b": [("u", 1)]}


def test_more_members_than_partitions_leaves_some_members_idle() -> None:
    got = range_assign({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 2})
    assert got == {"a": [("t", 0)], "b": [("t", 1)], "c": []}


def test_every_partition_is_assigned_exactly_once() -> None:
    subs = {f"m{i}": ["t", "u"] for i in range(7)}
    got = range_assign(subs, {"t": 10, "u": 3})
    flat = sorted(p for parts in got.values() for p in parts)
    assert flat == sorted([("t", i) for i in range(10)] + [("u", i) for i in range(3)])
