"""Base images for the compose test when no image registry can be reached: made from Debian's
packages with ``debootstrap --variant=minbase bookworm`` and ``docker import``, under the names the
Dockerfiles use, so the project's own Dockerfiles build unchanged.

* ``debian:bookworm-slim`` - the minbase root filesystem (apt, dpkg, bash, coreutils), apt lists
  emptied, sources for bookworm, bookworm-updates and bookworm-security; what
  ``docker/zookeeper/Dockerfile`` builds on.
* ``python:3.11-slim-bookworm`` - the same plus Debian's CPython 3.11, made to behave as the
  official slim image does: ``/usr/local`` is a virtual environment of it, so ``python``,
  ``python3`` and ``pip`` are on the PATH in ``/usr/local/bin`` and ``pip install`` is allowed as
  root (Debian's own interpreter refuses it, PEP 668); the C headers are there so an extension
  builds once a compiler is installed (the Dockerfile's build stage installs gcc). Debian's 3.11 is
  3.11.2, the official image's is a later 3.11 patch release.

Each image is kept as the tar of its root filesystem in a cache folder (``MINIKAFKA_DOCKER_CACHE``,
default ``<temp>/minikafka-docker-cache``), named by a hash of its recipe (suite, packages, the
commands run in it, the image config), so a changed recipe is a new file and a run with the cache
warm imports in seconds. debootstrap's downloaded packages are kept beside them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
DEBIAN_SOURCES = f"""Types: deb
URIs: {MIRROR}
Suites: {SUITE} {SUITE}-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: {SUITE}-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
# Shrinks every image the way Debian's official slim images are: no apt lists, no caches.
CLEAN = ("rm -f /etc/apt/sources.list && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin "
         "/var/log/*.log /var/cache/debconf/*-old")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class BaseImage:
    tag: str
    packages: tuple[str, ...]
    setup: str  # run in the root filesystem (chroot) after debootstrap
    changes: tuple[str, ...]  # `docker import --change` lines
    # Trust this machine's own CAs too (below): pip reaches the package index over HTTPS.
    trusts_local_cas: bool = False

    def recipe_hash(self) -> str:
        recipe = {"suite": SUITE, "mirror": MIRROR, "sources": DEBIAN_SOURCES, "clean": CLEAN, "tag": self.tag,
                  "packages": self.packages, "setup": self.setup, "changes": self.changes}
        return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]

    def cache_file(self, cache: Path) -> Path:
        slug = self.tag.replace(":", "-").replace("/", "-")
        return cache / f"{slug}-{self.recipe_hash()}.tar"


DEBIAN = BaseImage("debian:bookworm-slim", packages=(), setup="true",
                   changes=(f"ENV PATH={PATH}", 'CMD ["bash"]'))
PYTHON = BaseImage(
    "python:3.11-slim-bookworm",
    packages=("python3.11", "libpython3.11-dev", "ca-certificates", "netbase", "tzdata"),
    # /usr/local as a venv: python/python3/pip in /usr/local/bin, packages in /usr/local/lib.
    # (python3.11-venv goes in with apt: debootstrap fails to configure it in its own pass.)
    # The static libpython (40 MB) is not in the official image either.
    setup=("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
           "python3.11-venv && python3.11 -m venv /usr/local && /usr/local/bin/python -m pip --version "
           "&& rm -f /usr/lib/python3.11/config-3.11-x86_64-linux-gnu/libpython3.11*.a "
           "&& find /usr/lib/python3.11 -name __pycache__ -prune -exec rm -rf {} +"),
    changes=(f"ENV PATH={PATH}", "ENV LANG=C.UTF-8", 'CMD ["python3"]'), trusts_local_cas=True)
BASE_IMAGES = (DEBIAN, PYTHON)


def cache_dir() -> Path:
    d = Path(os.environ.get("MINIKAFKA_DOCKER_CACHE") or Path(tempfile.gettempdir()) / "minikafka-docker-cache")
    d.mkdir(parents=True, exist_ok=True)
    return d


def debootstrap_missing_reason() -> str | None:
    if os.geteuid() != 0:
        return "building base images with debootstrap needs root"
    if shutil.which("debootstrap") is None:
        return "debootstrap is not installed (apt-get install debootstrap; `make setup` does)"
    return None


def build_rootfs_tar(image: BaseImage, out: Path, log: Path) -> None:
    """debootstrap + setup into a scratch folder, then its tar at ``out`` (written atomically)."""
    debs = cache_dir() / "debootstrap-debs"
    debs.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="mk-rootfs-"))
    try:
        root = work / "root"
        cmd = ["debootstrap", "--variant=minbase", f"--cache-dir={debs}"]
        if image.packages:
            cmd.append("--include=" + ",".join(image.packages))
        with log.open("ab") as out_log:
            subprocess.run([*cmd, SUITE, str(root), MIRROR], check=True, stdout=out_log, stderr=subprocess.STDOUT,
                           timeout=900)
            (root / "etc/apt/sources.list.d/debian.sources").write_text(DEBIAN_SOURCES)
            subprocess.run(["chroot", str(root), "/bin/sh", "-ec", f"{image.setup} && {CLEAN}"], check=True,
                           stdout=out_log, stderr=subprocess.STDOUT, timeout=600,
                           env={"PATH": PATH, "LANG": "C.UTF-8", "HOME": "/root"})
        for d in ("dev", "proc", "sys", "tmp", "run"):  # the engine provides these
            for child in (root / d).iterdir() if (root / d).is_dir() else ():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        partial = out.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(root), "--numeric-owner", "--xattrs", "-cf", str(partial), "."],
                       check=True, timeout=600)
        partial.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


LOCAL_CAS = Path("/usr/local/share/ca-certificates")


def _add_local_cas(docker: list[str], env: dict[str, str], tag: str) -> None:
    """A machine whose HTTPS goes through a proxy of its own (a company's, or a sandbox's) trusts that
    proxy's CA in /usr/local/share/ca-certificates; an image built from Debian here must trust it too
    for ``pip install`` in a build to reach the package index (Debian's pip reads the system bundle).
    Added as one thin layer on top of the cached root filesystem, so the cache does not depend on it.
    Certificates only: public, nothing secret."""
    certs = sorted(LOCAL_CAS.glob("*.crt")) if LOCAL_CAS.is_dir() else []
    if not certs:
        return
    with tempfile.TemporaryDirectory(prefix="mk-cas-") as ctx:
        for c in certs:
            shutil.copy(c, Path(ctx) / c.name)
        (Path(ctx) / "Dockerfile").write_text(
            f"FROM {tag}\nCOPY *.crt /usr/local/share/ca-certificates/\nRUN update-ca-certificates\n")
        subprocess.run([*docker, "build", "-q", "-t", tag, ctx], env={**env, "DOCKER_BUILDKIT": "0"}, check=True,
                       capture_output=True, timeout=300)


def ensure_base_images(docker: list[str], env: dict[str, str], log: Path,
                       pull_timeout_s: float = 60.0) -> list[str]:
    """Make every base image present in the engine: already there, else pulled, else imported from
    the cached root filesystem (built first when the cache has none). Returns what was done, one
    line per image, for the test's output."""
    done: list[str] = []
    for image in BASE_IMAGES:
        t0 = time.monotonic()
        inspect = subprocess.run([*docker, "image", "inspect", image.tag], env=env, capture_output=True, timeout=60)
        if inspect.returncode == 0:
            done.append(f"{image.tag}: present in the engine")
            continue
        pulled = subprocess.run([*docker, "pull", "-q", image.tag], env=env, capture_output=True,
                                timeout=pull_timeout_s, text=True)
        if pulled.returncode == 0:
            done.append(f"{image.tag}: pulled ({time.monotonic() - t0:.0f} s)")
            continue
        reason = debootstrap_missing_reason()
        if reason:
            raise RuntimeError(f"{image.tag} can be neither pulled ({pulled.stderr.strip()[-200:]}) nor built: {reason}")
        tar = image.cache_file(cache_dir())
        how = "cached root filesystem"
        if not tar.exists():
            build_rootfs_tar(image, tar, log)
            how = f"built with debootstrap in {time.monotonic() - t0:.0f} s"
        changes = [x for c in image.changes for x in ("--change", c)]
        subprocess.run([*docker, "import", *changes, str(tar), image.tag], env=env, check=True, capture_output=True,
                       timeout=600)
        if image.trusts_local_cas:
            _add_local_cas(docker, env, image.tag)
        size_mb = tar.stat().st_size / 2**20
        done.append(f"{image.tag}: imported from Debian packages ({how}, {size_mb:.0f} MB, "
                    f"{time.monotonic() - t0:.0f} s in all; {tar.name})")
    return done
