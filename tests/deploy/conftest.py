"""Fixtures of the compose test (tests/deploy): a Docker engine, the base images and the project's
images built with compose. Skipped, with the reason, where no engine can be had. What was done and
how long it took goes to the end of pytest's output (the "compose test" section)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compose_project import (
    COMPOSE,
    PROJECT_IMAGES,
    REPORT,
    BuiltImages,
    ComposeProject,
    compose_command,
    note,
)
from debian_base_images import ensure_base_images
from docker_engine import DockerEngine, EngineUnavailable, start_engine, stop_engine


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REPORT:
        terminalreporter.section("compose test")
        for line in REPORT:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerEngine]:
    t0 = time.monotonic()
    compose = compose_command()
    if subprocess.run([*compose, "version"], capture_output=True, timeout=60).returncode != 0:
        pytest.skip(f"no compose command ({' '.join(compose)}): apt-get install docker-compose (`make setup` does)")
    try:
        engine = start_engine()
    except EngineUnavailable as e:
        pytest.skip(str(e))
    note(f"engine: {engine.description}, up in {time.monotonic() - t0:.1f} s; compose: {' '.join(compose_command())}")
    try:
        yield engine
    finally:
        steps = stop_engine(engine)
        note("engine stopped: " + ", ".join(f"{k} {v:.1f} s" for k, v in steps.items())
             + f"; the engine was up {time.monotonic() - t0:.0f} s (it lives as long as the test session, "
             "stopped at its end: the steps above give the compose tests' own durations)")


@pytest.fixture(scope="session")
def compose_images(docker_engine: DockerEngine, tmp_path_factory: pytest.TempPathFactory) -> BuiltImages:
    """Base images (present, pulled or made from Debian) and ``compose build`` of the project."""
    workdir = tmp_path_factory.mktemp("compose-build")
    t0 = time.monotonic()
    for line in ensure_base_images([docker_engine.docker_cli], docker_engine.env(), workdir / "debootstrap.log"):
        note(f"base image {line}")
    note(f"base images ready in {time.monotonic() - t0:.0f} s")
    project = ComposeProject(docker_engine, f"mkbuild{os.getpid()}", [COMPOSE], workdir)
    t1 = time.monotonic()
    project.compose("build", timeout=1500)
    build_s = time.monotonic() - t1
    sizes = {}
    for image in (*PROJECT_IMAGES, "python:3.11-slim-bookworm", "debian:bookworm-slim"):
        size = docker_engine.docker("image", "inspect", "-f", "{{.Size}}", image, timeout=30).stdout.strip()
        sizes[image] = int(size) / 1e6
    note(f"compose build (minikafka + zookeeper images): {build_s:.0f} s; image sizes: "
         + ", ".join(f"{k} {v:.0f} MB" for k, v in sizes.items()))
    return BuiltImages(build_s, sizes)
