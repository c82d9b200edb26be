"""What ``wiscat check``, ``wiscat checks`` and ``wiscat link add`` refuse before anything is
fetched or stored."""

from __future__ import annotations

from datetime import timedelta

import pytest

from wiscat.cli import build_parser

PEER = "http://127.0.0.1:8081/oai"


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(argv)
    assert stopped.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["check", "--set", "S", PEER],
            "wiscat check: error: the following arguments are required: --source",
        ),
        (
            ["check", "--set", "S", "--source", PEER, PEER, "--timeout", "-5"],
            "wiscat check: error: argument --timeout: '-5': seconds, more than 0 and at most 86400",
        ),
        (
            ["check", "--set", "S", "--source", PEER, PEER, "--timeout", "nan"],
            "wiscat check: error: argument --timeout: 'nan': seconds, more than 0 and at most "
            "86400",
        ),
        (
            ["check", "--set", "S", "--source", PEER],
            "wiscat check: error: the following arguments are required: PEER_URL",
        ),
        (
            ["check", "--set", "S", "--source", "ftp://x/oai", PEER],
            "wiscat check: error: argument --source: 'ftp://x/oai' is not an http(s) URL",
        ),
        (
            ["check", "--set", "S", "--source", PEER, "http://[::1/oai"],
            "wiscat check: error: argument PEER_URL: 'http://[::1/oai' is not an http(s) URL",
        ),
        (
            ["check", "--set", "S", "--source", "http://host:port/oai", PEER],
            "wiscat check: error: argument --source: 'http://host:port/oai' is not an http(s) URL",
        ),
        (
            ["check", "--set", "S", "--source", PEER, "http://h/oai?verb=Identify"],
            "wiscat check: error: argument PEER_URL: the base URL must not carry a query or "
            "fragment (OAI-PMH §3.1.1)",
        ),
        (
            ["check", "--set", "WIS GISC", "--source", PEER, PEER],
            "wiscat check: error: argument --set: set 'WIS GISC' is not a set name: at most 200 "
            "letters, digits and -_.!~*'(), levels joined by ':' (OAI-PMH setSpec)",
        ),
        (
            ["checks", "add", "c", "--set", "S:", "--source", PEER, PEER],
            "wiscat checks add: error: argument --set: set 'S:' is not a set name: at most 200 "
            "letters, digits and -_.!~*'(), levels joined by ':' (OAI-PMH setSpec)",
        ),
        (
            ["check", "--set", "S", "--source", PEER, PEER, "--sample", "-1"],
            "wiscat check: error: argument --sample: '-1': a whole number, 0 to 999999999",
        ),
        (
            ["checks", "add", "c", "--set", "S", "--source", PEER, PEER, "--sample", "-3"],
            "wiscat checks add: error: argument --sample: '-3': a whole number, 0 to 999999999",
        ),
        (
            ["checks", "add", "c", "--set", "S", "--source", PEER, PEER, "--sample", "10001"],
            "wiscat checks add: error: argument --sample: '10001': at most 10000",
        ),
        (
            ["checks", "reports", "--limit", "99999999999999999999"],
            "wiscat checks reports: error: argument --limit: '99999999999999999999': a whole "
            "number, 0 to 999999999",
        ),
        (
            ["provider", "--port", "99999"],
            "wiscat provider: error: argument --port: '99999': a port, 1 to 65535",
        ),
        (
            ["harvester", "--port", "-1"],
            "wiscat harvester: error: argument --port: '-1': a port, 1 to 65535",
        ),
        (
            ["link", "add", "x", "--url", PEER, "--overlap", "soon"],
            "wiscat link add: error: argument --overlap: 'soon' is not a duration "
            "(examples: 90s, 15m, 1h, 7d, 1h30m)",
        ),
        (
            ["checks", "add", "c", "--set", "S", "--source", PEER, PEER, "--every", "9999999999d"],
            "wiscat checks add: error: argument --every: '9999999999d' is longer than 3650 days",
        ),
        (
            ["checks", "add", "c", "--set", "S", "--source", PEER, PEER, "--every", "0s"],
            "wiscat checks add: error: argument --every: '0s': at least 1m between runs",
        ),
        (
            ["checks", "add", "c", "--set", "S", "--source", PEER, PEER, "--every", "soon"],
            "wiscat checks add: error: argument --every: 'soon' is not a duration "
            "(examples: 90s, 15m, 1h, 7d, 1h30m)",
        ),
    ],
)
def test_bad_arguments_are_refused_with_their_reason(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert refusal(capsys, *argv) == message


def test_good_arguments_are_taken_as_given() -> None:
    args = build_parser().parse_args(
        ["checks", "add", "c", "--set", "S", "--source", PEER, PEER, "--every", "1h30m"]
    )
    assert (args.every, args.sample, args.peers) == (timedelta(hours=1, minutes=30), 0, [PEER])
    args = build_parser().parse_args(["check", "--set", "S", "--source", PEER, PEER, PEER])
    assert (args.source, args.peers, args.sample) == (PEER, [PEER, PEER], 0)
