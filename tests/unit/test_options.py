"""Engine options are a typed record: a misspelt one is refused with the valid names."""

from __future__ import annotations

import pytest

from lifecycle import ConfigError, InProcessPhases, Lifecycle, Options, RunConfig


def test_a_misspelt_option_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as info:
        Lifecycle(RunConfig(), phases=InProcessPhases(), tripwires="off", options={"keep_record": True})
    message = str(info.value)
    assert "'keep_record'" in message
    assert "keep_records" in message and "environment_checks" in message and "binding_policy" in message
    assert info.value.field == "options"


def test_options_are_accepted_as_a_mapping_or_a_record() -> None:
    from_mapping = Lifecycle(RunConfig(), phases=InProcessPhases(), tripwires="off", options={"keep_records": True})
    from_record = Lifecycle(RunConfig(), phases=InProcessPhases(), tripwires="off", options=Options(keep_records=True))
    assert from_mapping.options == from_record.options == Options(keep_records=True)
    assert from_mapping.records and from_record.records  # lifecycle_started was kept
    assert Lifecycle(RunConfig(), phases=InProcessPhases(), tripwires="off").options == Options()
