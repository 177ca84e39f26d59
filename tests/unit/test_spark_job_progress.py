"""The Spark example jobs' progress line (issue 17: no silent long work)."""

from __future__ import annotations

import io

from client.cli.progress import Progress
from spark_jobs.job_session import StageProgress, _SparkProgress, stage_line


def test_stage_line_names_each_active_stage_with_tasks_done() -> None:
    line = stage_line("topic_to_parquet", [StageProgress(3, "parquet", 8, 5, 2), StageProgress(1, "scan", 4, 4, 0)], 12.4)
    assert line == "topic_to_parquet: 12s, stage 1 4/4 tasks; stage 3 5/8 tasks (2 running)"
    assert stage_line("j", [], 0.2) == "j: 0s, waiting for Spark"


class _Info:
    name, numTasks, numCompletedTasks, numActiveTasks = "scan", 10, 7, 3


class _Tracker:
    def getActiveStageIds(self) -> list[int]:
        return [2]

    def getStageInfo(self, _sid: int) -> _Info:
        return _Info()


class _Spark:  # the status tracker is PySpark's boundary, not ours
    class sparkContext:  # PySpark's attribute name
        @staticmethod
        def statusTracker() -> _Tracker:
            return _Tracker()


def test_the_reporter_writes_lines_off_a_terminal_and_stops() -> None:
    now = [0.0]
    out = io.StringIO()
    reporter = _SparkProgress("job", _Spark(), Progress(out, interactive=False, clock=lambda: now[0]))
    now[0] = 6.0  # past the 5 s report interval
    deadline = 200
    while "stage 2 7/10 tasks (3 running)" not in out.getvalue() and deadline:
        reporter._stop.wait(0.05)
        deadline -= 1
    reporter.stop()
    assert "job: 6s, stage 2 7/10 tasks (3 running)" in out.getvalue()
    assert not reporter._thread.is_alive()


def test_a_job_honours_the_master_it_was_submitted_to() -> None:
    """Issue 33: ``spark-submit --master spark://...`` must not be overridden by the job's default."""
    from client.spark import DEFAULT_MASTER, choose_master

    assert choose_master(None, {}) == DEFAULT_MASTER  # run as a plain Python program
    assert choose_master(None, {"PYSPARK_GATEWAY_PORT": "41234"}) is None  # under spark-submit: its master
    assert choose_master("local[4]", {"PYSPARK_GATEWAY_PORT": "41234"}) == "local[4]"  # an explicit --master wins


class _Query:
    """Spark's StreamingQuery as await_query uses it (a boundary this project does not own)."""

    def __init__(self, interrupt: bool, stop_fails: bool) -> None:
        self.interrupt, self.stop_fails, self.stopped = interrupt, stop_fails, False

    def awaitTermination(self) -> None:  # Spark's name
        if self.interrupt:
            raise KeyboardInterrupt

    def stop(self) -> None:
        self.stopped = True
        if self.stop_fails:
            raise ConnectionError("py4j: the JVM is gone")


def test_ctrl_c_stops_the_streaming_example_quietly() -> None:
    """Issue 33 item 11: Ctrl-C of events_per_key printed py4j tracebacks and exited 0."""
    import logging

    from spark_jobs.events_per_key import await_query

    assert await_query(_Query(interrupt=False, stop_fails=False)) is False
    q = _Query(interrupt=True, stop_fails=True)
    assert await_query(q) is True and q.stopped  # a stop that fails (the JVM went first) is fine
    assert logging.getLogger("py4j").level == logging.CRITICAL  # py4j's shutdown noise off
