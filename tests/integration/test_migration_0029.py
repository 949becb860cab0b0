"""Upgrading to 0029 (consumer_groups.initial_rebalance_generation) and back, on SQLite and
PostgreSQL: a group rebalancing with an initial delay's columns keeps its delay, named by its
generation; a group not rebalancing loses the columns an older process left behind; and the
downgrade clears the columns of a delay that is not under way, keeping one that is."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from tests.migration_helpers import at_revision, connected

_GROUP = ("INSERT INTO consumer_groups (group_id, generation_id, updated_ms, protocol_type, state, "
          "rebalance_deadline_ms, initial_rebalance_remaining_ms, new_member_added{columns}) "
          "VALUES ('{group}', {generation}, 1, 'consumer', '{state}', 3000, {remaining}, {added}{values})")


def _groups(url: str) -> list[tuple[object, ...]]:
    """Each group's generation, remaining delay, new_member_added and delay generation ('gone'
    at 0028)."""
    with connected(url) as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("consumer_groups")}
        began = "initial_rebalance_generation" if "initial_rebalance_generation" in columns else "'gone'"
        return [(g, gen, remaining, bool(added), b) for g, gen, remaining, added, b in conn.execute(text(
            f"SELECT group_id, generation_id, initial_rebalance_remaining_ms, new_member_added, {began} "
            "FROM consumer_groups ORDER BY group_id"))]


def test_0029_names_a_delay_under_way_by_its_generation_and_clears_the_columns_left_behind(
        empty_url: str) -> None:
    config = at_revision(
        empty_url, "0028",
        _GROUP.format(group="delayed", generation=4, state="PreparingRebalance", remaining=7000, added="TRUE",
                      columns="", values=""),
        # A delay a process from before 0028 ended: its columns stay, the group is Stable.
        _GROUP.format(group="left-behind", generation=5, state="Stable", remaining=7000, added="TRUE",
                      columns="", values=""),
        _GROUP.format(group="plain", generation=2, state="PreparingRebalance", remaining="NULL", added="FALSE",
                      columns="", values=""))

    command.upgrade(config, "0029")
    assert _groups(empty_url) == [("delayed", 4, 7000, True, 4), ("left-behind", 5, None, False, None),
                                  ("plain", 2, None, False, None)]


def test_0029_downgrade_keeps_a_delay_under_way_and_clears_one_of_an_earlier_generation(empty_url: str) -> None:
    config = at_revision(empty_url, "0029", *(
        _GROUP.format(group=g, generation=gen, state="PreparingRebalance", remaining=7000, added="TRUE",
                      columns=", initial_rebalance_generation", values=f", {began}")
        for g, gen, began in (("delayed", 4, "4"), ("earlier", 6, "5"), ("unnamed", 3, "NULL"))))

    command.downgrade(config, "0028")
    assert _groups(empty_url) == [("delayed", 4, 7000, True, "gone"), ("earlier", 6, None, False, "gone"),
                                  ("unnamed", 3, None, False, "gone")]
