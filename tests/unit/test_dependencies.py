"""The dependency floors that security fixes need, and parsers that say their safety aloud
(RELIABILITY X03, X08)."""

from __future__ import annotations

import ast
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]

# lxml before 6.1.0: iterparse resolved external entities by default (an XXE); aiohttp before
# 3.14.4: a gzip body of many concatenated members took unbounded CPU to decompress.
FLOORS = {"lxml": Version("6.1.0"), "aiohttp": Version("3.14.4")}

PARSERS = {"XMLParser", "XMLPullParser", "iterparse"}
SAFE = {"resolve_entities": False, "no_network": True}


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = (Requirement(line) for line in project["dependencies"])
    return {requirement.name: requirement for requirement in found}


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_the_declared_and_installed_versions_meet_the_security_floors(name: str) -> None:
    """X03 (lxml) and X08 (aiohttp): pyproject allows no version below the floor, and the one
    installed is not below it either."""
    specifier = _requirements()[name].specifier
    lower = [Version(s.version) for s in specifier if s.operator in (">=", ">", "==", "~=")]
    assert lower and max(lower) >= FLOORS[name], f"pyproject.toml: {name}{specifier}"
    assert Version(version(name)) >= FLOORS[name]


def _parser_calls(path: Path) -> list[tuple[int, dict[str, object]]]:
    calls = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if name in PARSERS:
            keywords: dict[str, object] = {
                k.arg: k.value.value
                for k in node.keywords
                if k.arg in SAFE and isinstance(k.value, ast.Constant)
            }
            calls.append((node.lineno, keywords))
    return calls


def test_every_xml_parser_refuses_entities_and_the_network_explicitly() -> None:
    """X03: every lxml parser the code builds (the factory shared.iso19139.safe_parser among
    them) passes resolve_entities=False and no_network=True itself, not trusting lxml's
    defaults, which have changed between versions."""
    sources = sorted((ROOT / "shared").rglob("*.py")) + sorted((ROOT / "services").rglob("*.py"))
    found = {
        f"{path.relative_to(ROOT)}:{line}": keywords
        for path in sources
        for line, keywords in _parser_calls(path)
    }
    factory = [where for where in found if where.startswith("shared/iso19139.py:")]
    assert factory, "the parser factory in shared/iso19139.py builds no XMLParser"
    assert {where: keywords for where, keywords in found.items() if keywords != SAFE} == {}
