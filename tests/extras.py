"""Skips that name the missing piece: the module, and the extra that installs it."""

from __future__ import annotations

from types import ModuleType

import pytest


def missing(module: str, extra: str) -> str:
    """The skip reason when `module` cannot be imported: the module, and the extra that brings it."""
    return f"needs the Python module {module!r}: pip install -e '.[{extra}]'"


def need(module: str, extra: str) -> ModuleType:
    """`module`, or skip the test saying which package is missing and which extra brings it."""
    return pytest.importorskip(module, reason=missing(module, extra))
