"""What the ``wiscat`` subcommands share when they read their arguments: argparse types that say
why a value is refused, and :func:`command`, which gives every subcommand its help page (what
it does, examples, exit statuses) and its handler."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from wiscat.shared.settings import Settings

T = TypeVar("T")

# What a subcommand runs: ``main`` calls ``args.handler(settings, args)``.
Handler = Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]

# The statuses every command shares (``main`` gives them), after the command's own.
COMMON_EXITS = {
    2: "bad arguments or settings (a name that names no link or check), or the database "
    "could not be used",
    130: "interrupted by Ctrl-C (143 by SIGTERM, 129 by SIGHUP)",
}


def epilog(examples: Sequence[str], exits: Mapping[int, str]) -> str:
    """The end of a help page: ``examples`` (command lines), then the exit statuses, the
    command's own ``exits`` first, each line as written (the page is not re-wrapped)."""
    statuses = {**COMMON_EXITS, **exits}
    lines = ["examples:", *(f"  {example}" for example in examples), "", "exit status:"]
    lines += [f"  {code:<4} {meaning}" for code, meaning in sorted(statuses.items())]
    return "\n".join(lines)


def command(
    sub: Any,
    name: str,
    *,
    help: str,
    handler: Handler,
    examples: Sequence[str],
    exits: Mapping[int, str],
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` to ``sub``, dispatched to ``handler``, with a help page that
    ends with ``examples`` and the exit statuses."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=help[0].upper() + help[1:] + ".",
        epilog=epilog(examples, exits),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=handler)
    return parser


def group(sub: Any, name: str, *, help: str, examples: Sequence[str]) -> Any:
    """Add command group ``name`` (``wiscat link``, ...) to ``sub``; its actions are added to
    the subparsers it returns."""
    parser = sub.add_parser(
        name,
        help=help,
        description=help[0].upper() + help[1:] + ".",
        epilog="examples:\n" + "\n".join(f"  {example}" for example in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser.add_subparsers(dest=f"{name}_command", required=True, metavar="ACTION")


def argument(check: Callable[[str], T]) -> Callable[[str], T]:
    """``check`` as an argparse type: its ValueError's message becomes the argument's error
    (argparse would otherwise say only "invalid value")."""

    def convert(value: str) -> T:
        try:
            return check(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc

    return convert


def port_number(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r}: a port, 1 to 65535")
    return int(value)


def count(value: str) -> int:
    if not value.isdigit() or len(value) > 9:
        raise argparse.ArgumentTypeError(f"{value!r}: a whole number, 0 to 999999999")
    return int(value)


def limit(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 1000:
        raise argparse.ArgumentTypeError(f"{value!r}: a whole number, 1 to 1000")
    return int(value)


# The duration syntax, for the help of every option that takes one.
DURATIONS = "a duration such as 90s, 15m, 1h, 7d or 1h30m"
