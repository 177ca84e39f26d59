"""pytest imports test modules by basename (rootdir-relative, no packages under tests/): two
``test_x.py`` in different folders abort the whole run at collection ("import file mismatch"), so
every test module's basename is unique across tests/ (a full `make test` once stopped so)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_basename_is_unique() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, count in names.items() if count > 1] == []
