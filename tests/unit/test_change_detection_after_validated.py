"""Change detection after VALIDATED (lifecycle/config/_snapshot.py): every kind of field, every kind
of change, named with its old and new value, through `Snapshot` and through the lifecycle.

Written to kill the mutants scripts/mutation makes of the config snapshot.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from lifecycle import ConfigMutated, RunConfig
from lifecycle.config import config_drift, require_unchanged, snapshot_config
from lifecycle.testing import Snapshot, flatten
from lifecycle.testing import config_diff as diff
from states import State


def poke(obj: Any, name: str, value: Any) -> None:
    """What a user's code does to a frozen config when it should not."""
    object.__setattr__(obj, name, value)


def test_an_untouched_config_has_no_changes() -> None:
    config = RunConfig()
    snap = Snapshot(config)
    assert snap.changes() == []
    assert config_drift(snapshot_config(config), config) == []


@pytest.mark.parametrize(("field", "value"), [("backend", "nccl"), ("plan", "rl"), ("rehearsal", True)])
def test_a_changed_top_level_field_is_named_with_old_and_new_value(field: str, value: Any) -> None:
    config = RunConfig()
    snap = Snapshot(config)
    old = getattr(config, field)
    poke(config, field, value)
    assert snap.changes() == [(field, old, value)]


def test_a_changed_section_field_is_named_with_its_dotted_name() -> None:
    config = RunConfig()
    snap = Snapshot(config)
    poke(config.training, "seed", 7)
    poke(config.model, "num_layers", 9)
    assert [name for name, _, _ in snap.changes()] == ["model.num_layers", "training.seed"]


def test_a_section_replaced_by_an_equal_copy_is_not_a_change() -> None:
    config = RunConfig()
    snap = Snapshot(config)
    poke(config, "training", dataclasses.replace(config.training))
    assert snap.changes() == []


def test_the_lifecycle_fails_on_a_top_level_field_changed_after_validation(make_lc) -> None:
    config = RunConfig()
    lc = make_lc(config=config)
    lc.validate()
    poke(config, "backend", "nccl")
    with pytest.raises(ConfigMutated) as info:
        lc.start_services()
    assert info.value.field == "backend"
    assert lc.state is State.FAILED


def test_drift_lists_added_removed_and_changed_fields_sorted_by_name() -> None:
    old = {"b": 1, "a": [1], "gone": 3}
    new = {"b": 2, "a": [1], "added": 4}
    assert config_drift(old, new) == [("added", None, 4), ("b", 1, 2), ("gone", 3, None)]


def test_ignored_fields_are_not_drift() -> None:
    assert config_drift({"x": 1, "y": 1}, {"x": 2, "y": 2}, ignore=["x"]) == [("y", 1, 2)]


def test_a_list_edited_in_place_after_the_snapshot_is_drift() -> None:
    @dataclasses.dataclass
    class Holder:
        items: list[int]
        table: dict[str, int]
        tags: set[str]

    holder = Holder(items=[1], table={"a": 1}, tags={"t"})
    snap = snapshot_config(holder)
    holder.items.append(2)
    holder.table["b"] = 2
    holder.tags.add("u")
    assert [name for name, _, _ in config_drift(snap, holder)] == ["items", "table", "tags"]


def test_values_whose_equality_raises_or_is_not_a_bool_compare_by_identity() -> None:
    class Raises:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("ambiguous")

    class Elementwise:
        def __eq__(self, other: object) -> Any:
            return [True]

    a, b, c, d = Raises(), Raises(), Elementwise(), Elementwise()
    assert config_drift({"x": a, "y": c}, {"x": a, "y": c}) == []
    assert [n for n, _, _ in config_drift({"x": a, "y": c}, {"x": b, "y": d})] == ["x", "y"]


def test_a_value_of_another_type_is_drift_even_when_equal() -> None:
    assert config_drift({"x": 1}, {"x": 1.0}) == [("x", 1, 1.0)]
    assert config_drift({"x": 1}, {"x": True}) == [("x", 1, True)]


def test_only_configs_and_dataclass_instances_can_be_snapshot() -> None:
    with pytest.raises(TypeError, match="cannot snapshot a dict: pass a RunConfig or a dataclass"):
        snapshot_config({"a": 1})
    with pytest.raises(TypeError, match="cannot snapshot a type"):
        snapshot_config(RunConfig)


def test_flatten_and_diff_use_dotted_names_for_nested_sections() -> None:
    assert flatten({"a": {"b": {"c": 1}}, "d": 2}) == {"a.b.c": 1, "d": 2}
    assert diff({"a": {"b": 1}}, {"a": {"b": 2}}) == [("a.b", 1, 2)]


def test_require_unchanged_names_the_first_change_and_lists_all() -> None:
    require_unchanged({"a": 1}, {"a": 1}, what="the TransformerConfig")
    with pytest.raises(ConfigMutated) as info:
        require_unchanged({"a": 1, "b": 1}, {"a": 2, "b": 3}, what="the TransformerConfig")
    assert info.value.field == "a"
    assert info.value.fields == ["a", "b"]
    assert "the TransformerConfig changed after VALIDATED: a was 1, is now 2 (changed: a, b)" in str(info.value)
    assert "replace()" in str(info.value)


def test_a_change_in_every_section_at_once_is_detected() -> None:
    config = RunConfig()
    snap = Snapshot(config)
    sections = [f.name for f in dataclasses.fields(config) if dataclasses.is_dataclass(getattr(config, f.name))]
    for name in sections:  # edited in place: the top-level fields still hold the same section objects
        section = getattr(config, name)
        first = dataclasses.fields(section)[0].name
        poke(section, first, _other(getattr(section, first)))
    assert {name.split(".")[0] for name, _, _ in snap.changes()} == set(sections)


def _other(value: Any) -> Any:
    """A value of the same type that differs from `value`."""
    if isinstance(value, bool) or value is None:
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "-changed"
    return [value]


def test_require_unchanged_takes_what_and_ignore_by_keyword_only() -> None:
    with pytest.raises(TypeError):
        require_unchanged({"a": 1}, {"a": 1}, "the TransformerConfig")  # type: ignore[misc]
