"""What every example job does first: find the cluster, get a SparkSession with the format."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from client.cli.tools import bootstrap_from_args, security_from_args
from client.connection import ClusterView
from client.spark.cluster_io import check_topics_exist
from proto import errors


class JobSession:
    """The bootstrap servers and a session; ``close()`` stops the session only if the job made it
    (a job called from a program that already has one leaves it running)."""

    def __init__(self, app_name: str, args: argparse.Namespace, read_topics: str | None = None) -> None:
        """``read_topics`` (comma-separated): topics the job reads; a missing one is an error before
        Spark starts (a read of it would write 0 rows and exit 0, which looks like success)."""
        try:
            self.bootstrap = bootstrap_from_args(args)
        except errors.KafkaError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        if read_topics:
            try:
                view = ClusterView(self.bootstrap, security=security_from_args(args))
                try:
                    check_topics_exist(view, [t.strip() for t in read_topics.split(",") if t.strip()])
                finally:
                    view.close()
            except errors.KafkaError as e:
                print(f"error: {e}", file=sys.stderr)
                raise SystemExit(1) from None
        from pyspark.sql import SparkSession

        from client.spark import local_session

        self.owns_session = SparkSession.getActiveSession() is None
        self.spark: Any = local_session(app_name, master=args.master)

    def close(self) -> None:
        if self.owns_session:
            self.spark.stop()
