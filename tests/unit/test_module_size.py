"""No module of the project is over 600 lines (STYLE): past that, a module holds more than one
concern, and a newcomer cannot read it whole. Test and benchmark modules included."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("services", "shared", "migrations", "tests", "bench", "tools")
MAX_LINES = 600


def long_modules(root: Path) -> list[str]:
    """``path: lines`` of every Python module under ``root``'s project folders past the limit."""
    found = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_LINES:
                found.append(f"{path.relative_to(root)}: {lines}")
    return found


def test_no_module_is_over_600_lines() -> None:
    assert long_modules(ROOT) == []


def test_a_long_module_is_found(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "shared" / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert long_modules(tmp_path) == [f"shared/long.py: {MAX_LINES + 1}"]
