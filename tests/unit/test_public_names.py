"""Tests, benchmarks and examples use the packages' public names.

The scan and its allow-list (`WHITE_BOX`, each entry with its reason) are in tests/private_names.py;
import-linter's private-module contract runs the same check (`lint-imports`). Here: the scan finds
every form of reaching in, and the tree holds no reach-in the list does not name, nor an entry no
file needs any more (the list only shrinks).
"""

from __future__ import annotations

from tests.private_names import WHITE_BOX, private_names, stale, unlisted, used


def test_the_scan_finds_every_form_of_reaching_in() -> None:
    source = '''
import lifecycle.audit._audit as a
from lifecycle.log._lock import LOCK_NAME
from lifecycle.audit import _feed, audit
from states._guards import g
monkeypatch.setattr("lifecycle.core_entry.distributed._STORES", {})
from lifecycle.audit import RankAudit
import lifecycle.__main__
from lifecycle.core_entry import distributed, train
import lifecycle.resume.checkpoint
import os

train._forward_step(distributed.enter)
lifecycle.resume.checkpoint._publish.__name__
monkeypatch.setattr(audit, "_cause", None)
getattr(RankAudit, "_chain")
os._exit, os.write, distributed.__doc__, _feed.Feeder
CHILD = """
import sys
from lifecycle.core_entry import _phases
"""
NOTE = "see lifecycle.log._writer: import nothing from it, as the docs say"
'''
    assert private_names(source) == {
        "lifecycle.audit._audit",
        "lifecycle.log._lock",
        "lifecycle.log._lock.LOCK_NAME",
        "lifecycle.audit._feed",
        "states._guards",
        "states._guards.g",
        "lifecycle.core_entry.distributed._STORES",
        "lifecycle.core_entry.train._forward_step",
        "lifecycle.resume.checkpoint._publish",
        "lifecycle.audit.audit._cause",
        "lifecycle.audit.RankAudit._chain",
        "lifecycle.core_entry._phases",
    }


def test_the_list_check_names_new_reach_ins_and_entries_no_file_needs() -> None:
    found = {"tests/a.py": {"x._y", "x._z"}, "tests/b.py": {"x._y"}}
    allowed = {"tests/a.py": {"x._y"}, "tests/c.py": {"x._w"}}
    assert unlisted(found, allowed) == {"tests/a.py": ["x._z"], "tests/b.py": ["x._y"]}
    assert stale(found, allowed) == {"tests/c.py": ["x._w"]}
    assert unlisted(found, found) == {} and stale(found, found) == {}


def test_tests_benchmarks_and_examples_reach_no_private_name_outside_the_white_box_list() -> None:
    found = used()
    new = unlisted(found, WHITE_BOX)
    assert not new, f"private names reached from outside their package; export public ones: {new}"
    old = stale(found, WHITE_BOX)
    assert not old, f"WHITE_BOX entries no file needs any more; delete them: {old}"
