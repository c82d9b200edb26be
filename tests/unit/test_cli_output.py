"""The columns the ``wiscat`` list commands print."""

from __future__ import annotations

from wiscat.cli.output import table


def test_columns_are_as_wide_as_their_widest_cell() -> None:
    # a registry link's name is 25 characters: the old fixed 20 pushed every column after it
    lines = table(
        ["NAME", "ENABLED", "URL / LAST ERROR"],
        [
            ["registry-0e7c7d38026c7b2d", "no", "http://a.example/oai"],
            ["tokyo", "yes", "http://b.example/oai  [HTTP 503 from http://b.example/oai]"],
        ],
    )
    assert lines == [
        "NAME                       ENABLED  URL / LAST ERROR",
        "registry-0e7c7d38026c7b2d  no       http://a.example/oai",
        "tokyo                      yes      http://b.example/oai  [HTTP 503 from http://b.example/oai]",
    ]
    # each column starts at the same place on every line
    starts = {line.index("http") for line in lines[1:]}
    assert starts == {lines[0].index("URL")}


def test_headers_alone() -> None:
    assert table(["NAME", "SET", "PEERS"], []) == ["NAME  SET  PEERS"]


def test_counts_align_right_and_no_line_ends_in_blanks() -> None:
    lines = table(
        ["PEER", "LISTED", "MISSING", "STATUS"],
        [
            ["http://a.example/oai", "1,234,567", "0", "consistent"],
            ["http://b.example/oai", "-", "-", ""],
        ],
        right=range(1, 3),
    )
    assert lines == [
        "PEER                     LISTED  MISSING  STATUS",
        "http://a.example/oai  1,234,567        0  consistent",
        "http://b.example/oai          -        -",
    ]
