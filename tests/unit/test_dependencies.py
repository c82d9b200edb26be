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
    """X03: every lxml parser the code builds (the factory wiscat.shared.iso19139.safe_parser among
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


def _sources() -> list[Path]:
    return sorted((ROOT / "shared").rglob("*.py")) + sorted((ROOT / "services").rglob("*.py"))


def test_x07_huge_tree_is_never_enabled() -> None:
    """X07: no parser of the code lifts libxml2's limits (depth 256, text nodes of 10 MB):
    ``huge_tree`` is never given but as the constant False, and XML_PARSE_HUGE is named
    nowhere."""
    enabled = []
    for path in _sources():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.keyword)
                and node.arg == "huge_tree"
                and not (isinstance(node.value, ast.Constant) and node.value.value is False)
            ):
                enabled.append(f"{path.relative_to(ROOT)}:{node.value.lineno}")
            if isinstance(node, ast.Name | ast.Attribute | ast.Constant):
                named = getattr(node, "id", None) or getattr(node, "attr", None)
                if named == "XML_PARSE_HUGE" or (
                    isinstance(node, ast.Constant) and node.value == "XML_PARSE_HUGE"
                ):
                    enabled.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert enabled == []


# calls whose first argument is a path or expression evaluated against a tree (ElementPath or
# XPath); X09 wants none of them built from a value a peer or client sent
_PATH_CALLS = {"xpath", "find", "findall", "findtext", "iterfind", "iter", "iterchildren"}
_XPATH_CLASSES = {"XPath", "ETXPath", "XPathEvaluator", "XPathElementEvaluator"}


class _StaticPaths:
    """Tells whether an expression is fixed by the code alone: literals, constants built from
    literals (module-level, imported UPPER_CASE from the project, or a function's locals only
    ever given such values), loop variables over literal tuples, and parameters that every
    call in the module passes such a value."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parents = {
            child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)
        }
        self.functions = {
            node.name: node
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        self.constants: dict[ast.AST | None, set[str]] = {}
        self.loop_names: set[str] = set()
        imported = {
            alias.asname or alias.name
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("wiscat.")
            for alias in node.names
            if alias.name.strip("_").isupper()
        }
        self.constants[None] = set(imported)
        assigned: dict[tuple[ast.AST | None, str], list[ast.expr]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        key = (self.scope(node), target.id)
                        assigned.setdefault(key, []).append(node.value)
        for _ in range(3):  # constants built from constants
            for (scope, name), values in assigned.items():
                if all(self.static(v) for v in values):
                    self.constants.setdefault(scope, set()).add(name)
        for node in ast.walk(tree):
            loops = (
                [node]
                if isinstance(node, ast.For)
                else node.generators
                if isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp)
                else []
            )
            for loop in loops:
                if isinstance(loop.iter, ast.Tuple | ast.List) and self.static(loop.iter):
                    self.loop_names |= {
                        n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)
                    }

    def scope(self, node: ast.AST) -> ast.AST | None:
        """The function ``node`` is in (None: the module)."""
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
            parent = self.parents.get(parent)
        return parent

    def static(self, node: ast.expr, seen: frozenset[str] = frozenset()) -> bool:
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Attribute):
            return isinstance(node.value, ast.Name)  # a module's name: etree.Entity
        if isinstance(node, ast.Tuple | ast.List):
            return all(self.static(e, seen) for e in node.elts)
        if isinstance(node, ast.JoinedStr):
            return all(
                self.static(v.value if isinstance(v, ast.FormattedValue) else v, seen)
                for v in node.values
            )
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
            return self.static(node.left, seen) and self.static(node.right, seen)
        if isinstance(node, ast.Name):
            scope = self.scope(node)
            parameters = (
                {a.arg for a in scope.args.args}
                if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef)
                else set()
            )
            if node.id in parameters:
                assert isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef)
                return self._static_parameter(scope, node.id, seen)
            return (
                node.id in self.constants.get(scope, set())
                or node.id in self.constants[None]
                or node.id in self.loop_names
            )
        return False

    def _static_parameter(
        self, function: ast.FunctionDef | ast.AsyncFunctionDef, name: str, seen: frozenset[str]
    ) -> bool:
        if function.name in seen:
            return False
        position = [a.arg for a in function.args.args].index(name)
        calls = [
            c
            for c in ast.walk(self.tree)
            if isinstance(c, ast.Call)
            and isinstance(c.func, ast.Name)
            and c.func.id == function.name
        ]
        passed = [c.args[position] if position < len(c.args) else None for c in calls] + [
            k.value for c in calls for k in c.keywords if k.arg == name
        ]
        return bool(calls) and all(
            p is not None and self.static(p, seen | {function.name}) for p in passed
        )


def _built_paths(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    paths = _StaticPaths(tree)
    regexes = {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) == "re.compile"
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    built = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in _XPATH_CLASSES:
            built.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
            continue
        if name not in _PATH_CALLS or not isinstance(func, ast.Attribute):
            continue
        if isinstance(func.value, ast.Name) and func.value.id in regexes:
            continue  # a regular expression's findall, not a tree's
        argument = node.args[0]
        if isinstance(argument, ast.Constant) and isinstance(argument.value, bytes):
            continue  # bytes.find: the bytes of a body, not a tree
        if not paths.static(argument):
            built.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return built


def test_x09_no_tree_path_is_built_from_a_value_at_run_time() -> None:
    """X09: every path a tree is searched with (find, findall, findtext, iterfind, iter,
    xpath) in shared/ and services/ is fixed by the code: literals, module constants, literal
    loop values, parameters always given such values; no XPath class is ever built. A value a
    peer or client sent (an identifier, a set) can thus never become part of an expression:
    lookups go by SQL parameter, never by XPath."""
    found = [where for path in _sources() for where in _built_paths(path)]
    assert found == []


def test_x09_the_scan_finds_a_path_built_from_a_value(tmp_path: Path) -> None:
    """The control of the test above: a path built from a parameter given a run-time value,
    and an XPath class, are found."""
    source = tmp_path / "module.py"
    source.write_text(
        "from lxml import etree\n"
        "_Q = '{urn:x}'\n"
        "def lookup(root, identifier):\n"
        "    return root.xpath(f\"//record[identifier='{identifier}']\")\n"
        "def fixed(root, tag):\n"
        "    return root.find(_Q + tag)\n"
        "def caller(root, request):\n"
        "    fixed(root, 'header')\n"
        "    lookup(root, request.query['identifier'])\n"
        "    return etree.XPath('//a')\n"
    )
    global ROOT  # reported relative to the folder scanned
    saved, ROOT = ROOT, tmp_path
    try:
        found = _built_paths(source)
    finally:
        ROOT = saved
    assert found == [
        "module.py:4: root.xpath(f\"//record[identifier='{identifier}']\")",
        "module.py:10: etree.XPath('//a')",
    ]
