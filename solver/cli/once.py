"""An option given twice is bad input: the command classes every ``shardplan`` command is made with.

click keeps the last of an option's values, silently: ``solve --tp 4 --tp 8`` planned tp 8, and
``--ttft-ms 2000 --ttft-ms 500`` held 500 ms. Scripts and agents assemble these command lines, and an
option given twice there is almost always a template that appended it again, so a command refuses one
before any option is read: one line naming it, exit 2, nothing run and nothing written.

What may repeat: an option declared ``multiple=True`` (``--allow``) or ``count=True`` repeats by design; a
flag with no ``--no-`` form (``--json``) says the same each time it is given, so giving it again is harmless;
``--help`` and ``--version`` end the command before anything runs. A flag with both forms
(``--runner-up/--no-runner-up``) is refused when given twice, either form: the pair contradicts itself, and
which forms were given is not known here (the parser reports the option, not the word that named it).
No parsing of our own: click's parser reads the command line, once here to count, once as it always does.
"""

from __future__ import annotations

from collections import Counter

import click

from shardplan.models import SpecError


def refuse_repeats(command: click.Command, ctx: click.Context, args: list[str]) -> None:
    """Raise ``SpecError`` naming the first option ``args`` gives more than once that takes one value."""
    if not args or ctx.resilient_parsing:  # resilient: shell completion, which reports nothing
        return
    # The parser's third result lists each option once per time it was given, in command-line order
    # (its spellings and ``--x=1`` forms already resolved); it reads values, calls no callback.
    _, _, given = command.make_parser(ctx).parse_args(args=list(args))
    times = Counter(given)
    for param in given:
        if times[param] > 1 and isinstance(param, click.Option) and not repeatable(param):
            raise SpecError(option_name(param), f"given {times[param]} times, but it takes one value; give it once")


def repeatable(option: click.Option) -> bool:
    """Whether giving ``option`` again is harmless (the module docstring says which are)."""
    one_way_flag = option.is_flag and not option.secondary_opts
    return option.multiple or option.count or one_way_flag or option.is_eager


def option_name(option: click.Option) -> str:
    """The option's long name without dashes, as errors name a field: ``tp``, ``runner-up``, ``ttft-ms``."""
    long_names = [o for o in option.opts if o.startswith("--")]
    return (long_names or option.opts)[0].lstrip("-")


class OnceCommand(click.Command):
    """A command that refuses a single-valued option given twice (``refuse_repeats``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        refuse_repeats(self, ctx, args)
        return super().parse_args(ctx, args)


class OnceGroup(click.Group):
    """A group whose own options and whose commands (``command_class``) each refuse one given twice."""

    command_class = OnceCommand

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        refuse_repeats(self, ctx, args)
        return super().parse_args(ctx, args)
