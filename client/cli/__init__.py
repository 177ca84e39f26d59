"""The ``minikafka`` command line: one module per command family.

``main`` is the console-script entry point (pyproject ``minikafka = "client.cli:main"``) and
``python -m client.cli`` runs it too (the local cluster launches brokers that way). Nothing in
the library (``client.producer``, ``client.consumer``, ``client.admin``, ...) imports this package.
"""

from __future__ import annotations

from client.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
