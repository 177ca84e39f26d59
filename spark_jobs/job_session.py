"""What every example job does first: find the cluster, get a SparkSession with the format."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from client.cli.tools import bootstrap_from_args
from proto import errors


class JobSession:
    """The bootstrap servers and a session; ``close()`` stops the session only if the job made it
    (a job called from a program that already has one leaves it running)."""

    def __init__(self, app_name: str, args: argparse.Namespace) -> None:
        try:
            self.bootstrap = bootstrap_from_args(args)
        except errors.KafkaError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        from pyspark.sql import SparkSession

        from client.spark import local_session

        self.owns_session = SparkSession.getActiveSession() is None
        self.spark: Any = local_session(app_name, master=args.master)

    def close(self) -> None:
        if self.owns_session:
            self.spark.stop()
