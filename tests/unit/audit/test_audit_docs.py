"""Every rule has its doc page, and docs/audit.md lists every rule with a link to it."""

from __future__ import annotations

from pathlib import Path

from lifecycle.audit import RULES

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_every_rule_has_a_page_naming_its_id_and_slug_and_no_page_lacks_a_rule() -> None:
    pages = {p.stem for p in (DOCS / "rules").glob("*.md")}
    assert pages == {r.id for r in RULES}
    for rule in RULES:
        text = (DOCS / rule.doc.removeprefix("docs/")).read_text()
        assert text.startswith(f"# {rule.id} `{rule.slug}`")
        assert "## How to fix" in text and "## Example" in text


def test_the_audit_guide_links_every_rule() -> None:
    guide = (DOCS / "audit.md").read_text()
    for rule in RULES:
        assert f"| [{rule.id}](rules/{rule.id}.md) | {rule.slug} |" in guide


def test_rule_ids_are_unique_and_stable_in_form() -> None:
    ids = [r.id for r in RULES]
    assert len(set(ids)) == len(ids) == len({r.slug for r in RULES})
    assert all(i.startswith("LA") and len(i) == 5 and i[2:].isdigit() for i in ids)
