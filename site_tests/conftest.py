"""Fixtures shared across the suite."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD_TIMEOUT = 600  # seconds: a cold build runs every lab, each with its own timeout


def mkdocs_build(config, site_dir, cache_dir, timeout=BUILD_TIMEOUT):
    """`mkdocs build --strict` of `config` into `site_dir`, with labs cached in `cache_dir`."""
    env = dict(
        os.environ,
        LAB_CACHE_DIR=str(cache_dir),
        NO_MKDOCS_2_WARNING="1",
        DISABLE_MKDOCS_2_WARNING="true",
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(config),
            "--site-dir",
            str(site_dir),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=config.parent,
    )


def run_unpacked(folder, *command, timeout, hide=("PYTHONPATH",)):
    """Run `python COMMAND` in an unpacked download, with none of the course's setup around.

    `hide` names environment variables the repository's own runs rely on and a reader who
    downloaded the folder would not have.
    """
    env = {key: value for key, value in os.environ.items() if key not in hide}
    return subprocess.run(
        [sys.executable, *command],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The real site, built once per test session with an empty lab cache: (site, cache).

    An empty cache makes the build run every lab, so the pages show this build's runs and the
    tests can compare them with the records the runs left in `cache`.
    """
    work = tmp_path_factory.mktemp("build")
    site, cache = work / "site", work / "cache"
    proc = mkdocs_build(ROOT / "mkdocs.yml", site, cache)
    assert proc.returncode == 0, f"mkdocs build failed:\n{proc.stdout}\n{proc.stderr}"
    return site, cache


@pytest.fixture(scope="module")
def torch_refuses(tmp_path_factory):
    """A folder with a `torch` package that fails on import, to put first on PYTHONPATH."""
    folder = tmp_path_factory.mktemp("no-torch")
    (folder / "torch").mkdir()
    (folder / "torch" / "__init__.py").write_text(
        "raise ImportError('torch imported before the arguments were checked')\n"
    )
    return folder
