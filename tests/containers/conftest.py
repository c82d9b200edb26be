"""What the container tests share: the base images built from Debian's packages (when missing)
and the wiscat image built from a clean copy of the checkout, once a session."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.containers.engine import BASE_IMAGES, FIGURES, IMAGE, ROOT, engine_env, podman, run

#: built in the background while the wiscat image is (the Python base comes first: the image
#: is built on it)
BACKGROUND_BASES = ("postgres", "nginx", "mosquitto")


def clean_copy(into: Path) -> Path:
    """The checkout as git would give it: tracked files and new ones not ignored (no .venv,
    no var/, no .env), as they are in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


@pytest.fixture(scope="session")
def background_bases() -> Iterator[dict[str, subprocess.Popen[str]]]:
    """The stand-ins for the postgres, nginx and mosquitto images, built (when missing) while
    the wiscat image is."""
    building = {
        which: subprocess.Popen(
            [str(BASE_IMAGES), which],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=engine_env(),
            start_new_session=True,
        )
        for which in BACKGROUND_BASES
    }
    yield building
    for each in building.values():
        if each.poll() is None:  # a test failed before it was needed: debootstrap too
            os.killpg(each.pid, signal.SIGKILL)
        each.communicate()


@pytest.fixture(scope="session")
def python_base() -> str:
    """The stand-in for python:3.11-slim, built when missing."""
    started = time.monotonic()
    image = run([str(BASE_IMAGES), "python"], timeout=1200).strip()
    FIGURES["Python base image ready in"] = f"{time.monotonic() - started:.0f} s"
    return image


@pytest.fixture(scope="session")
def base_images(
    python_base: str, background_bases: dict[str, subprocess.Popen[str]]
) -> dict[str, str]:
    started = time.monotonic()
    images = {"python": python_base}
    for which, building in background_bases.items():
        out, err = building.communicate(timeout=1200)
        assert building.returncode == 0, f"{BASE_IMAGES} {which} failed:\n{out}\n{err}"
        images[which] = out.strip()
    FIGURES["then waited for the PostgreSQL, nginx and mosquitto base images"] = (
        f"{time.monotonic() - started:.0f} s"
    )
    return images


@pytest.fixture(scope="session")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clean_copy(tmp_path_factory.mktemp("checkout"))


@pytest.fixture(scope="session")
def image(
    background_bases: dict[str, subprocess.Popen[str]], python_base: str, checkout: Path
) -> str:
    # background_bases asked for first: those base images are built while this one is
    started = time.monotonic()
    podman(
        "build",
        "--build-arg",
        f"PYTHON_IMAGE={python_base}",
        "--tag",
        IMAGE,
        str(checkout),
        timeout=900,
    )
    FIGURES["image built in"] = f"{time.monotonic() - started:.0f} s"
    size = int(podman("image", "inspect", "--format", "{{.Size}}", IMAGE))
    base = int(podman("image", "inspect", "--format", "{{.Size}}", python_base))
    FIGURES["image size"] = f"{size / 1e6:.0f} MB (its base {base / 1e6:.0f} MB)"
    return IMAGE
