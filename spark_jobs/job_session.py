"""What every example job does first: find the cluster, get a SparkSession with the format.

While a job runs, a progress line (client/cli/progress.py: redrawn each second on a terminal, a
line every 5 s off one) says which Spark stages run and how many of their tasks are done, read
from Spark's status tracker by a daemon thread; the line is built by ``stage_line`` (pure).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from client.cli.progress import Progress
from client.cli.tool_args import bootstrap_from_args, security_from_args
from client.connection import ClusterView
from client.spark.cluster_io import check_topics_exist
from proto import errors


@dataclass(frozen=True)
class StageProgress:
    stage_id: int
    name: str
    num_tasks: int
    completed: int
    active: int


def stage_line(app_name: str, stages: Sequence[StageProgress], elapsed_s: float) -> str:
    """One line: the job, time so far and each active stage's tasks done / total."""
    if not stages:
        return f"{app_name}: {elapsed_s:.0f}s, waiting for Spark"
    parts = [f"stage {s.stage_id} {s.completed}/{s.num_tasks} tasks" + (f" ({s.active} running)" if s.active else "")
             for s in sorted(stages, key=lambda s: s.stage_id)]
    return f"{app_name}: {elapsed_s:.0f}s, " + "; ".join(parts)


class _SparkProgress:
    """Polls the status tracker twice a second until stopped (a daemon: never holds the job up)."""

    def __init__(self, app_name: str, spark: Any, progress: Progress | None = None) -> None:
        self.app_name = app_name
        self.spark = spark
        self.progress = progress or Progress()
        self._stop = threading.Event()
        self._started = self.progress.clock()
        self._thread = threading.Thread(target=self._run, name="spark-progress", daemon=True)
        self._thread.start()

    def _stages(self) -> list[StageProgress]:
        tracker = self.spark.sparkContext.statusTracker()
        out = []
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is not None:
                out.append(StageProgress(sid, info.name, info.numTasks, info.numCompletedTasks, info.numActiveTasks))
        return out

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                stages = self._stages()
            except Exception:  # the session is stopping: nothing more to report
                return
            self.progress.update(functools.partial(stage_line, self.app_name, stages,
                                                   self.progress.clock() - self._started))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.progress.done()


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

        from client.spark import choose_master, local_session

        self.owns_session = SparkSession.getActiveSession() is None
        self.spark: Any = local_session(app_name, master=choose_master(args.master, os.environ))
        self._progress = _SparkProgress(app_name, self.spark)

    def close(self) -> None:
        self._progress.stop()
        if self.owns_session:
            self.spark.stop()
