"""The README's rule table ("The rule catalog") is the registry's, row for row, so the two cannot drift:
the same IDs in the same order, each with the registry's name, kind and policy switch; and the counts
the section gives for the EXP- and DAG- rules are the registry's counts."""

from __future__ import annotations

import re

from shardplan.rules.catalog import CATALOG, LISTED_RULES
from tests.unit.source_tree import REPO

SECTION = re.compile(r"^## The rule catalog\n(.*?)(?=^## )", re.MULTILINE | re.DOTALL)
ROW = re.compile(r"^\| ([A-Z]+-\d{3}) \| ([a-z0-9-]+) \| (.+?) \|$", re.MULTILINE)
# A kind cell: the kind, then for a default rule the switch that turns it off, e.g.
# "default (`--allow expert-tp`)", or a note on when the rule is in force.
SWITCH = re.compile(r"`--allow ([a-z0-9-]+)`")
NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


def catalog_section() -> str:
    match = SECTION.search((REPO / "README.md").read_text(encoding="utf-8"))
    assert match, "README.md has no '## The rule catalog' section"
    return match.group(1)


def readme_rows() -> list[tuple[str, str, str, str | None]]:
    """(id, name, kind, switch) of every row of the section's table, in order."""
    rows = []
    for rule_id, name, kind_cell in ROW.findall(catalog_section()):
        switch = SWITCH.search(kind_cell)
        rows.append((rule_id, name, kind_cell.split()[0], switch.group(1) if switch else None))
    return rows


def test_the_table_lists_the_rules_the_solver_posts():
    expected = [(rule.id, rule.name, rule.kind.value, rule.switch) for rule in CATALOG]
    assert readme_rows() == expected


def test_the_counts_of_the_other_families_are_the_registrys():
    text = catalog_section()
    for prefix in ("EXP", "DAG"):
        match = re.search(rf"(\w+)\s+`{prefix}-`\s+rules", text)
        assert match, f"the section no longer counts the {prefix}- rules"
        stated = NUMBER_WORDS.get(match.group(1)) or int(match.group(1))
        assert stated == sum(rule.id.startswith(f"{prefix}-") for rule in LISTED_RULES), prefix
