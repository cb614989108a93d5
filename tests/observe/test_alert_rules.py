"""The detections: `promtool test rules` on synthetic series, and the rules' bookkeeping
(every alert tested firing and silent, documented in a runbook, built on known metrics)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpugov.observe import names

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "helm" / "gpugov" / "files" / "alerts.yaml"
UNIT = Path(__file__).parent / "promtool" / "alerts_test.yaml"
RUNBOOKS = REPO / "docs" / "runbooks.md"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (Debian package "
                                    "prometheus; .ci/setup.d/10-debian-packages.sh)")


def _rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def _alerts() -> list[str]:
    return [r["alert"] for r in _rules() if "alert" in r]


@needs_promtool
def test_rules_file_is_valid() -> None:
    p = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    p = subprocess.run([PROMTOOL, "test", "rules", str(UNIT)], capture_output=True, text=True,
                       cwd=UNIT.parent)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS" in p.stdout


@needs_promtool
def test_promtool_catches_a_broken_expectation(tmp_path: Path) -> None:
    """The unit tests can fail: flip one expectation and promtool must say so."""
    text = UNIT.read_text().replace("rule_files:\n  - ../../../", f"rule_files:\n  - {REPO}/")
    broken = text.replace("pod: idle, tenant: t", "pod: busy, tenant: t", 1)
    assert broken != text
    (tmp_path / "t.yaml").write_text(broken)
    p = subprocess.run([PROMTOOL, "test", "rules", "t.yaml"], capture_output=True, text=True,
                       cwd=tmp_path)
    assert p.returncode != 0 and "GpugovGpuHoarding" in p.stdout + p.stderr


def test_every_alert_is_shown_firing_and_silent() -> None:
    """promtool compares the exact set of alerts, so a firing case whose group also holds a
    look-alike series shows that one silent; each alert also has a case before its `for`."""
    unit = yaml.safe_load(UNIT.read_text())
    firing: dict[str, int] = {}
    silent: set[str] = set()
    for t in unit["tests"]:
        for case in t.get("alert_rule_test", []):
            if case.get("exp_alerts"):
                firing[case["alertname"]] = len(case["exp_alerts"])
            else:
                silent.add(case["alertname"])
    missing = set(_alerts()) - set(firing)
    assert not missing, f"alerts never shown firing: {missing}"
    assert not set(_alerts()) - silent, set(_alerts()) - silent


def test_every_alert_has_a_runbook_section() -> None:
    text = RUNBOOKS.read_text()
    headings = {h.strip().lower() for h in re.findall(r"^## (.+)$", text, re.M)}
    for rule in _rules():
        if "alert" in rule:
            assert rule["alert"].lower() in headings, rule["alert"]
            assert rule["annotations"]["runbook"] == f"docs/runbooks.md#{rule['alert'].lower()}"


def test_rules_use_only_contract_metric_names() -> None:
    for rule in _rules():
        words = set(re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)\b", rule["expr"]))
        used = {w for w in words if w.startswith(("gpugov_", "DCGM_"))}
        assert used <= names.ALL_METRICS, used - names.ALL_METRICS
