"""A name that names no link is a bad argument: every command that takes a link's name says so
on one line and exits 2, as ``wiscat harvest`` always did (it was 1 for the ``link`` commands)."""

from __future__ import annotations

from tests.e2e.nodes import NodeFactory

COMMANDS = [
    ["harvest", "nosuch"],
    ["link", "runs", "nosuch"],
    ["link", "quarantine", "nosuch"],
    ["link", "refused", "nosuch"],
    ["link", "test", "nosuch"],
    ["link", "set", "nosuch", "--every", "2h"],
    ["link", "remove", "nosuch"],
]


async def test_no_link_named_x_exits_2_from_every_command(make_node: NodeFactory) -> None:
    node = await make_node("NOLINK")
    await node.wiscat("migrate")
    got = {}
    for args in COMMANDS:
        code, out, err = await node.wiscat(*args, check=False)
        got[" ".join(args[:2])] = (code, out, err.splitlines()[-1:])
    expected = (2, "", ["wiscat: no link named 'nosuch'"])
    assert got == {" ".join(args[:2]): expected for args in COMMANDS}


async def test_no_check_named_x_exits_2(make_node: NodeFactory) -> None:
    node = await make_node("NOCHECK")
    code, out, err = await node.wiscat("checks", "remove", "nosuch", check=False)
    assert (code, out, err) == (2, "", "wiscat: no check named 'nosuch'\n")
