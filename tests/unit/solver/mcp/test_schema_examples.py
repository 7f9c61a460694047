"""The examples the tools' schemas show an agent are values the tools take."""

from __future__ import annotations

import re

from shardplan.rules.catalog import get_rule
from shardplan.solver.mcp.schemas import RuleInput


def test_the_rule_names_explain_rule_offers_as_examples_are_rules():
    # It offered 'tp-crosses-node', a name no rule has (TP-003 is tp-crosses-domain): an agent that tried it
    # got "unknown rule".
    description = RuleInput.model_fields["rule_id"].description or ""
    examples = re.findall(r"[A-Z]+-\d{3}|[a-z]+(?:-[a-z]+)+", description.split("e.g.", 1)[1])
    assert len(examples) == 2
    for example in examples:
        get_rule(example)
