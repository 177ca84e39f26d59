"""``minikafka broker --config FILE [--set key=value ...]``: run one broker in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import uvloop

from broker.log.manager import LogDirLockedError
from broker.server.allocator import tune_malloc
from broker.server.config import ConfigError, load_config
from broker.server.kafka_server import KafkaServer
from broker.server.observability import JsonFormatter
from zk.client import BrokerIdInUseError, ZooKeeperUnreachableError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("broker", help="run one broker in the foreground")
    p.add_argument("--config", type=Path, help="a Kafka-style server.properties file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config (repeatable), e.g. --set broker.id=1")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    p.add_argument("--log-format", choices=["text", "json"], default="text",
                   help="json: one JSON object per line, with broker id and event fields")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    tune_malloc()  # before the first batch-sized buffer: see broker/server/allocator.py
    try:
        config = load_config(args.config, args.set)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    handler = logging.StreamHandler(sys.stderr)
    if args.log_format == "json":
        handler.setFormatter(JsonFormatter(config.broker_id))
    else:
        handler.setFormatter(logging.Formatter(
            f"%(asctime)s %(levelname)s [broker {config.broker_id}] %(name)s: %(message)s"))
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    return uvloop.run(_serve(config))


async def _serve(config: Any) -> int:
    try:
        # The server builds its collaborators here: a bad zookeeper.digest.auth.file fails now.
        server = KafkaServer(config)
    except Exception as e:
        logging.getLogger("broker").exception("cannot start")
        print(f"error: broker failed to start: {e}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.startup()
    except ZooKeeperUnreachableError as e:
        # One line, no traceback: the cause is outside this process (Kafka logs the same
        # ZooKeeperClientTimeoutException and exits).
        print(f"error: {e.message}", file=sys.stderr)
        return 1
    except (BrokerIdInUseError, LogDirLockedError) as e:
        print(f"error: {e}", file=sys.stderr)
        await _quiet_stop(server)
        return 1
    except Exception as e:
        logging.getLogger("broker").exception("cannot start")
        print(f"error: broker failed to start: {e}", file=sys.stderr)
        await _quiet_stop(server)
        return 1
    await stop.wait()
    await server.shutdown(controlled=True)
    return 0


async def _quiet_stop(server: KafkaServer) -> None:
    zk = getattr(server, "zk", None)
    if zk is not None:
        try:
            await asyncio.to_thread(zk.stop)
        except Exception:
            pass
