"""Every ``wiscat`` help page ends with examples and the exit statuses, and the commands are
dispatched by the handler their subparser sets (no table of names to keep in step)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from wiscat.cli import build_parser


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.values()


def leaf_commands() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every command that runs something (``link add``, ``migrate``, ...), by its words."""
    found = []
    pending = [("", build_parser())]
    while pending:
        words, parser = pending.pop()
        children = list(_subparsers(parser))
        if not children and words:
            found.append((words, parser))
        pending += [(child.prog.removeprefix("wiscat "), child) for child in children]
    return sorted(found, key=lambda item: item[0])


LEAVES = leaf_commands()


def test_every_command_is_listed() -> None:
    # the walk finds the whole tree; a command added later is covered without a change here
    assert {words for words, _ in LEAVES} >= {
        "run", "provider", "harvester", "migrate", "harvest", "ingest", "delete", "generate",
        "link add", "link list", "link set", "link remove", "link runs", "link quarantine",
        "link test", "check", "checks add", "checks list", "checks remove", "checks reports",
        "registry keygen", "registry init-network", "registry add-member", "registry peers",
        "registry sync", "registry status", "settings",
    }  # fmt: skip


@pytest.mark.parametrize(("words", "parser"), LEAVES, ids=[words for words, _ in LEAVES])
def test_each_help_page_shows_an_example_and_the_exit_statuses(
    words: str, parser: argparse.ArgumentParser
) -> None:
    page = parser.format_help()
    examples = page.split("\nexamples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert examples and all(line.startswith("  ") for line in examples), page
    assert any(f"wiscat {words}" in line for line in examples), page
    statuses = page.split("\nexit status:\n", 1)[1].splitlines()
    codes = [line.split()[0] for line in statuses if line.strip()]
    assert codes[0] == "0" and "2" in codes and "130" in codes, page
    assert codes == sorted(codes, key=int), page


@pytest.mark.parametrize(("words", "parser"), LEAVES, ids=[words for words, _ in LEAVES])
def test_every_option_says_what_it_does(words: str, parser: argparse.ArgumentParser) -> None:
    # `checks add --set/--source/--sample/--disabled` had none (operator-3)
    silent = [
        action.option_strings or action.dest
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and not action.help
    ]
    assert silent == [], words


def test_the_exit_statuses_are_the_commands_own() -> None:
    page = dict(LEAVES)["check"].format_help()
    assert "\nexit status:\n" in page
    statuses = page.split("\nexit status:\n", 1)[1]
    assert statuses.splitlines()[:3] == [
        "  0    consistent: every peer holds what the source lists",
        "  1    inconsistent: a peer misses, keeps or differs on records (see the table)",
        "  2    could not check: bad arguments, or the source or a peer could not be listed",
    ]


def test_link_add_says_the_duration_syntax_and_when_into_is_required() -> None:
    page = " ".join(dict(LEAVES)["link add"].format_help().split())
    assert "incremental interval, a duration such as 90s, 15m, 1h, 7d or 1h30m (default 1h)" in page
    assert "the local set (default: the remote set's name; required without --set)" in page


def test_the_top_help_shows_a_tour_and_the_exit_statuses() -> None:
    page = build_parser().format_help()
    assert "  wiscat generate 50 samples/" in page
    assert "  wiscat ingest samples/" in page
    assert "  130  interrupted by Ctrl-C (143 by SIGTERM, 129 by SIGHUP)" in page


@pytest.mark.parametrize(("words", "parser"), LEAVES, ids=[words for words, _ in LEAVES])
def test_each_command_sets_its_handler(words: str, parser: argparse.ArgumentParser) -> None:
    handler = parser.get_default("handler")
    assert callable(handler), words
    assert handler.__module__.startswith("wiscat.cli."), handler
