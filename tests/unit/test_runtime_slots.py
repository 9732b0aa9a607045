"""A state added outside the project keeps what it makes in a typed `Slot` of the `Runtime`
(docs/extending.md): the value comes back with its type, a value of another type is refused in one
line naming the slot, and the release empties only its own slot."""

from __future__ import annotations

import pytest

from lifecycle import RunConfig, Runtime, Slot


class Batches(list[int]):
    """What a data state might make."""


DATA = Slot("data", Batches)
NOTES = Slot("notes", str)


def test_a_slot_gives_back_what_was_put_in_it_and_none_when_empty() -> None:
    rt = Runtime(config=RunConfig())
    assert rt.slot(DATA) is None
    batches = Batches([1, 2])
    filled = rt.with_slot(DATA, batches).with_slot(NOTES, "kept")
    assert filled.slot(DATA) is batches and filled.slot(NOTES) == "kept"
    assert rt.slot(DATA) is None  # the record is immutable: the earlier one is unchanged


def test_a_value_of_another_type_is_refused_in_one_line_naming_the_slot() -> None:
    with pytest.raises(TypeError) as caught:
        Runtime(config=RunConfig()).with_slot(DATA, [1, 2])  # type: ignore[arg-type]  # a plain list, not Batches
    message = str(caught.value)
    assert "'data'" in message and "Batches" in message and "list" in message and "\n" not in message


def test_the_release_empties_only_its_own_slot() -> None:
    rt = Runtime(config=RunConfig()).with_slot(DATA, Batches([3])).with_slot(NOTES, "stays")
    released = rt.without_slot(DATA)
    assert released.slot(DATA) is None and released.slot(NOTES) == "stays"
