"""docs/kb-coverage.md accounts for every MUST / MUST NOT / mandatory / invalid / reject line of the
knowledge base, and every rule it names exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shardplan.rules.catalog import LISTED_RULES

ROOT = Path(__file__).resolve().parents[3]
KB = ROOT.parent / "shared" / "kb"
DOC = ROOT / "docs" / "kb-coverage.md"
KEYWORDS = re.compile(r"\bmust\b|\binvalid\b|\breject|\bdisallowed\b|\bmandatory\b|non-negotiable", re.IGNORECASE)


def kb_lines() -> list[str]:
    refs = []
    for path in sorted(KB.glob("00[0-4]_*.txt")):
        prefix = path.name[:3]
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if KEYWORDS.search(line):
                refs.append(f"{prefix}:{number}")
    return refs


@pytest.mark.skipif(not KB.is_dir(), reason="the knowledge base (../shared/kb) is not beside this checkout")
def test_every_binding_statement_of_the_kb_has_a_row():
    doc = DOC.read_text()
    rows = set(re.findall(r"^\| (\d{3}:\d+) \|", doc, re.MULTILINE))
    missing = [ref for ref in kb_lines() if ref not in rows]
    assert not missing, f"kb lines without a row in docs/kb-coverage.md: {missing}"


def test_every_rule_the_doc_names_exists():
    known = {r.id for r in LISTED_RULES}
    named = set(re.findall(r"\b(?:GPU|PP|ALN|DP|TP|SP|EP|MEM|SLA|EXP|DAG)-\d{3}\b", DOC.read_text()))
    assert named <= known, sorted(named - known)
