"""Every command's --help at 80 columns is in docs/cli.md and stays true (issue 22, must-show),
fits 80 columns, uses one placeholder style and breaks no sentence in the middle."""

from __future__ import annotations

import re

import pytest

from gpugov.cli import helpdoc

PATHS = list(helpdoc.command_paths())


def test_docs_cli_md_is_every_commands_help_as_generated() -> None:
    """docs/cli.md equals `python -m gpugov.cli.helpdoc` output (regenerate after a change)."""
    assert helpdoc.DOC.read_text(encoding="utf-8") == helpdoc.render(), (
        "docs/cli.md is stale: run `python -m gpugov.cli.helpdoc`")


def test_the_reference_names_every_command() -> None:
    text = helpdoc.DOC.read_text(encoding="utf-8")
    for path in PATHS:
        assert f"## {' '.join(('gpugov', *path))}\n" in text, path


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "gpugov")
def test_help_fits_80_columns_in_one_placeholder_style(path: tuple[str, ...]) -> None:
    text = helpdoc.help_text(path)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    for internal in ("<path>", "<str>", "<float>", "<int>", "<list", "<bool>", "Optional"):
        assert internal not in text, (internal, text)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "gpugov")
def test_help_breaks_no_sentence_in_the_middle(path: tuple[str, ...]) -> None:
    """The description under `Usage:` wraps at the terminal's edge only: a short line followed
    by more of the same paragraph was a newline inside the docstring's sentence."""
    lines = helpdoc.help_text(path).splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("Usage:")) + 1
    end = next((i for i, line in enumerate(lines) if line.startswith("╭")), len(lines))
    body = lines[start:end]
    for line, after in zip(body, body[1:], strict=False):
        if line.strip() and after.strip() and not re.match(r"\s*([-*•]|\d+\.)\s", after):
            assert len(line) >= 60, f"break mid-sentence after {line.strip()!r}"
