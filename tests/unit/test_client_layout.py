"""client/ is split by audience (issue 17): the library never imports the command line, the
operations tooling or the broker, and kafka-python's top-level names are importable."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _library_modules() -> list[Path]:
    lib = ROOT / "client"
    return [p for p in lib.rglob("*.py") if not {"cli", "ops"} & set(p.relative_to(lib).parts)]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_library_imports_neither_cli_ops_nor_broker() -> None:
    bad = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.split(".")[0] in ("broker", "controller")
                                            or n.startswith(("client.cli", "client.ops")))
           for p in _library_modules()}
    assert {k: v for k, v in bad.items() if v} == {}


def test_top_level_names() -> None:
    import client
    from client import AdminClient, Consumer, Producer, TopicPartition
    from client.consumer import TopicPartition as ConsumerTP
    from client.structs import TopicPartition as StructsTP

    assert TopicPartition is ConsumerTP is StructsTP
    assert {"Producer", "Consumer", "AdminClient", "TopicPartition"} <= set(client.__all__)
    assert Producer and Consumer and AdminClient


def test_cli_entry_points() -> None:
    from client.cli import main

    assert callable(main)
    assert (ROOT / "client" / "cli" / "__main__.py").exists()  # python -m client.cli (brokers are launched so)
