"""No import circles among the project's modules, and the layers as the guide draws them (issue 28):
``proto`` (the wire) imports none of zk, broker, controller or client; ``zk`` (the ZooKeeper gateway)
imports only the wire; the controller (which runs inside a broker) imports nothing of the broker; the network layer
(``broker.network``) imports nothing of the API layer (``broker.server``, ``broker.replication``, ``broker.coordinator``); the client library imports
neither broker nor controller (its tools may: ``client.cli`` starts brokers, ``client.ops`` runs
local clusters and storage demos). Imports under ``if TYPE_CHECKING:`` count (a circle there is still a
circle in the design); imports inside functions do not (they are the deliberate way out)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("proto", "zk", "broker", "controller", "client", "spark_jobs")


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            mods[name] = f
    return mods


def _imports(body: list[ast.stmt], mods: dict[str, Path]) -> set[str]:
    """Project modules imported at module level (``from pkg import sub`` names the submodule)."""
    out: set[str] = set()
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            out |= _imports(node.body, mods)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in mods}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names} & set(mods)
            out |= subs
            if len(subs) < len(node.names) and node.module in mods:
                out.add(node.module)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(ast.parse(f.read_text()).body, mods) - {m} for m, f in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp: list[str] = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_circles() -> None:
    assert _cycles(_graph()) == []


def test_the_checker_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_layers() -> None:
    graph = _graph()
    wrong = sorted((m, t) for m, targets in graph.items() for t in targets
                   if (m.startswith("proto") and t.split(".")[0] in ("zk", "broker", "controller", "client"))
                   or (m.startswith("zk") and t.split(".")[0] in ("broker", "controller", "client"))
                   or (m.startswith("controller") and t.split(".")[0] == "broker")
                   or (m.startswith("client") and not m.startswith(("client.cli", "client.ops"))
                       and t.split(".")[0] in ("broker", "controller")))
    assert wrong == []


# The API layer, which the network layer gets injected (a socket server's frame handler, the request
# layer behind a protocol) and never imports.
API_LAYER = ("broker.server", "broker.replication", "broker.coordinator")


def _network_reaches_the_api_layer(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((m, t) for m, targets in graph.items() if m == "broker.network" or m.startswith("broker.network.")
                  for t in targets if t in API_LAYER or t.startswith(tuple(f"{p}." for p in API_LAYER)))


def test_the_network_layer_imports_nothing_of_the_api_layer() -> None:
    """broker.network (the socket server, the wire codecs, the protocols on it) imports nothing of
    broker.server, broker.replication or broker.coordinator (issue 28: listeners get a handler injected)."""
    assert _network_reaches_the_api_layer(_graph()) == []
    assert _network_reaches_the_api_layer({"broker.network.x": {"broker.server.kafka_apis"},
                                           "broker.network": {"broker.replication"},
                                           "broker.networking": {"broker.server"}}) \
        == [("broker.network", "broker.replication"), ("broker.network.x", "broker.server.kafka_apis")]
