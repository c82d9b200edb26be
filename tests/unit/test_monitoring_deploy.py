"""The Prometheus rules and the Grafana dashboard shipped under deploy/: valid for promtool,
each alert shown firing and not firing by promtool's unit tests, and every metric they read one
that wiscat exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from wiscat.harvester.metrics import HarvesterMetrics
from wiscat.provider.metrics import ProviderMetrics

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "wiscat.json"
# the names wiscat's processes export; `up` is Prometheus's own
METRIC_NAME = re.compile(r"\b(?:wiscat|process|python)_[a-z_]*[a-z]\b")
TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def promtool(*args: str, cwd: Path = PROMETHEUS) -> str:
    """Run promtool; its whole output when it fails."""
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: `make test` installs Debian's prometheus package"
    done = subprocess.run(
        [tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def exported_names() -> set[str]:
    """Every sample name the provider's and the harvester's /metrics can carry."""
    names = set()
    for registry in (ProviderMetrics().registry, HarvesterMetrics().registry):
        for name, kind in TYPE_LINE.findall(generate_latest(registry).decode()):
            names.add(name)
            names.update(name + suffix for suffix in SUFFIXES.get(kind, ()))
    return names


def dashboard_expressions() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def test_the_alert_rules_pass_promtool_check() -> None:
    assert "SUCCESS: 17 rules found" in promtool("check", "rules", "alerts.yml")


def test_the_alert_rules_pass_their_unit_tests() -> None:
    """alerts.test.yml fires each rule in one case and not in another, close to it (a link
    lagging by its own interval, a disabled link that does not, a link never harvested)."""
    assert "SUCCESS" in promtool("test", "rules", "alerts.test.yml")


def test_every_alert_rule_has_a_unit_test() -> None:
    rules = set(re.findall(r"^ *- alert: (\w+)$", (PROMETHEUS / "alerts.yml").read_text(), re.M))
    tested = (PROMETHEUS / "alerts.test.yml").read_text()
    fired = set(re.findall(r"alertname: (\w+)\n *exp_alerts:\n *- exp_labels", tested))
    not_fired = set(re.findall(r"alertname: (\w+)\n *exp_alerts: \[\]", tested))
    assert len(rules) == 17
    assert rules - fired == set(), "rules never shown firing"
    assert rules - not_fired == set(), "rules never shown quiet"


def test_the_example_prometheus_configuration_is_valid_and_names_the_rules_jobs() -> None:
    promtool("check", "config", "prometheus.yml")
    jobs = set(re.findall(r"job_name: (\S+)", (PROMETHEUS / "prometheus.yml").read_text()))
    used = set(re.findall(r'job=~?"([^"]+)"', (PROMETHEUS / "alerts.yml").read_text()))
    used |= {j for e in dashboard_expressions() for j in re.findall(r'job="([^"]+)"', e)}
    assert jobs == used == {"wiscat-provider", "wiscat-harvester"}


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool checks the dashboard's queries as recording rules (Grafana's $__rate_interval
    read as 5m)."""
    expressions = dashboard_expressions()
    assert len(expressions) >= 20
    rules = [
        {"record": f"dashboard:query_{n}", "expr": e.replace("$__rate_interval", "5m")}
        for n, e in enumerate(expressions)
    ]
    # YAML reads JSON
    (tmp_path / "dashboard.rules.yml").write_text(
        json.dumps({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    promtool("check", "rules", "dashboard.rules.yml", cwd=tmp_path)


@pytest.mark.parametrize("source", ["alerts.yml", "alerts.test.yml", "wiscat.json"])
def test_every_metric_the_rules_and_dashboard_read_is_exported(source: str) -> None:
    path = DASHBOARD if source == "wiscat.json" else PROMETHEUS / source
    used = set(METRIC_NAME.findall(path.read_text()))
    assert "wiscat_database_up" in used or source == "wiscat.json"
    assert used - exported_names() == set(), f"{source} reads metrics wiscat does not export"


def test_the_dashboard_shows_the_lag_per_interval_and_the_processes() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    for panel in panels:
        place = panel["gridPos"]
        assert place["x"] + place["w"] <= 24, panel["title"]
    # the status strip comes first
    assert [p["type"] for p in panels[:7]] == ["row"] + ["stat"] * 6
    assert dashboard["refresh"]
    used = set(METRIC_NAME.findall(DASHBOARD.read_text()))
    assert {
        "wiscat_link_interval_seconds",
        "wiscat_catalogue_records",
        "wiscat_database_up",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
    } <= used
