"""The examples in the library's docstrings run and pass, one test per module that has any.

pytest's ``--doctest-modules`` would import the files by path, as top-level ``models``, ``solver``
and so on: a second copy of each module beside the installed ``shardplan.*`` one (the code folders
install as ``shardplan.<folder>`` through package-dir). So the modules are imported by their
installed names and their docstrings run with the standard library's ``doctest``.
"""

from __future__ import annotations

import doctest
import importlib
import re

import pytest

from tests.unit.source_tree import source_modules

SOURCES = source_modules()
PROMPT = re.compile(r"^\s*>>> ", re.MULTILINE)


def doctests_of(module_name: str) -> list[doctest.DocTest]:
    """The docstring examples defined in the module itself (not in names it imports)."""
    module = importlib.import_module(module_name)
    return [test for test in doctest.DocTestFinder().find(module) if test.examples]


WITH_DOCTESTS = {name: doctests_of(name) for name in SOURCES if PROMPT.search(SOURCES[name].read_text("utf-8"))}


def test_every_prompt_in_the_source_is_a_collected_example():
    # A `>>>` that the finder misses (a docstring of an object doctest does not visit, a typo in the
    # prompt) would otherwise never run; this also holds the count the module parametrisation runs.
    for name, tests in WITH_DOCTESTS.items():
        prompts = len(PROMPT.findall(SOURCES[name].read_text("utf-8")))
        assert sum(len(test.examples) for test in tests) == prompts, name
    assert len(WITH_DOCTESTS) >= 9  # the modules with examples when this test was written


@pytest.mark.parametrize("module_name", sorted(WITH_DOCTESTS))
def test_docstring_examples_pass(module_name):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    for test in WITH_DOCTESTS[module_name]:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    assert runner.tries > 0
