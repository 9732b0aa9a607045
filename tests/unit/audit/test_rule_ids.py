"""Rule ids are constants (`RuleId`), each one a rule of `RULES`; no id is spelt as a string in
the code but in the rules table (and the ordering rules', `states/_ordering.py`, whose ids `RuleId`
reads), and every id the code, the docs or the README name is a rule."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from lifecycle.audit import RULES
from lifecycle.testing import RuleId

ROOT = Path(__file__).resolve().parents[3]
ID = re.compile(r"\bLA\d{3}\b")
RULES_MODULES = (ROOT / "lifecycle" / "audit" / "_rules.py", ROOT / "states" / "_ordering.py")
CODE = ("states", "bindings", "lifecycle")


def _constants() -> dict[str, str]:
    return {name: value for name, value in vars(RuleId).items() if name.isupper()}


def test_each_constant_is_one_rule_named_by_its_slug() -> None:
    constants = _constants()
    assert sorted(constants.values()) == sorted(r.id for r in RULES)
    for rule in RULES:
        assert constants[rule.slug.upper().replace("-", "_")] == rule.id


def test_no_code_spells_a_rule_id_as_a_string_but_the_rules_table() -> None:
    spelt = []
    for path in sorted(p for package in CODE for p in (ROOT / package).rglob("*.py")):
        if path in RULES_MODULES:
            continue
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if token.type == tokenize.STRING and re.fullmatch(r"[rbuf]*(['\"])LA\d{3}\1", token.string):
                spelt.append(f"{path.relative_to(ROOT)}:{token.start[0]}: {token.string}")
    assert spelt == [], "use RuleId.<SLUG> instead of a literal id:\n" + "\n".join(spelt)


def test_every_rule_id_named_in_the_code_and_the_docs_is_a_rule() -> None:
    known = {r.id for r in RULES}
    code = [p for package in CODE for p in (ROOT / package).rglob("*.py")]
    places = [*code, *(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]
    unknown = sorted(
        f"{path.relative_to(ROOT)}: {found}" for path in places for found in set(ID.findall(path.read_text())) - known
    )
    assert unknown == [], "ids that name no rule in RULES:\n" + "\n".join(unknown)
    assert len(places) > 10 and known <= {i for p in places for i in ID.findall(p.read_text())}
