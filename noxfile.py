"""Sessions for the course site: `nox -l` lists them, `nox -s NAME` runs one.

Every session uses one shared virtual environment for the pinned torch, made with the standard
library's venv and pip (pip sees the torch files on our build machines' disk; uv would not).
Environments live outside the checkout, in `$DDP_COURSE_VENVS` (default
`~/.cache/ddp-course/venvs`), one folder per torch release: a torch install is several GB, and
keeping it there lets clean clones and CI runs on the same machine reuse it. An environment is
(re)installed only when requirements.txt changes, so a second run of any session installs
nothing.
"""

import contextlib
import ctypes
import hashlib
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile

import nox

ROOT = pathlib.Path(__file__).parent
sys.path.insert(0, str(ROOT))
from hooks.fencerunner import WARNINGS_AS_ERRORS  # noqa: E402  (one home for the flags)
from hooks.labrunner import SHARED_CACHE_ENV  # noqa: E402

sys.path.append(str(ROOT / "code"))
import pace  # noqa: E402  (the machine's pace, which runs started side by side share)

REQUIREMENTS = ROOT / "requirements.txt"
VENVS = pathlib.Path(
    os.environ.get("DDP_COURSE_VENVS", pathlib.Path.home() / ".cache" / "ddp-course" / "venvs")
)
PINNED_TORCH = re.search(r"^torch==(\S+)$", REQUIREMENTS.read_text(), re.MULTILINE).group(1)

nox.options.default_venv_backend = "none"
nox.options.sessions = ["tests"]
# Material prints a banner about its successor on every build; it is noise in our logs.
os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
os.environ.setdefault("DISABLE_MKDOCS_2_WARNING", "true")  # a plugin prints another one

FENCE_ARGS = ["--markdown-docs", *WARNINGS_AS_ERRORS]
# A preview leaves out the search index: building it is a third of every rebuild, and an author
# editing prose wants to see the page. `SITE_SEARCH=true nox -s serve` puts it back.
SERVE_ENV = {"SITE_SEARCH": "false"}


def shared_venv(session, torch_version=PINNED_TORCH):
    """Create or refresh the venv for `torch_version` when requirements.txt changed.

    Returns its python. Every package but torch comes from requirements.txt as pinned.
    """
    venv = VENVS / f"torch-{torch_version}"
    python, stamp = venv / "bin" / "python", venv / "requirements.sha256"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes() + torch_version.encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted:
        return str(python)
    if not python.exists():
        session.log(f"creating {venv}")
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    others = [
        line for line in REQUIREMENTS.read_text().splitlines() if not line.startswith("torch==")
    ]
    pins = venv / "requirements-with-torch.txt"
    pins.write_text("\n".join([*others, f"torch=={torch_version}", ""]))
    session.run(str(python), "-m", "pip", "install", "-q", "-r", str(pins), external=True)
    stamp.write_text(wanted)
    return str(python)


def pytest(session, python, *args, env=None):
    session.run(python, "-m", "pytest", *args, external=True, env=env)


@nox.session
def fences(session):
    """Run every Python code fence in docs/**/*.md as a test."""
    python = shared_venv(session)
    pytest(session, python, *FENCE_ARGS, *(session.posargs or ["docs"]))


def die_with_nox():
    """For a child's preexec_fn: the kernel kills it when this nox process dies, however it dies
    (PR_SET_PDEATHSIG), so that nothing we start outlives a killed session."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)


def start_beside(command, log, env):
    """Start `command` beside this session, with `env` added and its output going to `log`; it
    dies with nox (die_with_nox)."""
    return subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=os.environ | env,
        preexec_fn=die_with_nox,
    )


def print_log(log):
    log.seek(0)
    print(log.read(), flush=True)


@contextlib.contextmanager
def folder_that_dies_with_nox(prefix):
    """A temporary folder, removed when the session ends however nox ends (SIGKILL included):
    a shell in a session of its own waits for its stdin, which closes when nox dies."""
    folder = tempfile.mkdtemp(prefix=prefix)
    guard = subprocess.Popen(
        ["sh", "-c", 'cat >/dev/null; rm -rf "$1"', "guard", folder],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield folder
    finally:
        guard.stdin.close()
        guard.wait()


def side_by_side(session, runs, python):
    """The environment for `runs` runs started side by side (code/pace.py), logged."""
    shared = pace.side_by_side(runs, python)
    session.log(f"{runs} runs side by side: each counts import torch as {shared[pace.ENV]} s")
    return shared


@nox.session
def tests(session):
    """The full suite: the fences, then site_tests/ in two halves that run side by side.

    One half builds the site and checks its pages in a browser (site_tests/site/); the other runs
    every test that needs no built site: the labs, the exercises, the failure gallery
    (site_tests/labs/), and the build's own machinery (site_tests/machinery/). Much of each is
    waiting (on Lighthouse's page loads, on a lab's ranks, on a daemon), so on two cores the
    pair takes less than the two one after the other.
    The site half prints as it goes; the other half's log follows when both are done. Both
    count one `import torch` measurement, doubled, as each has about half the machine, and
    both keep lab records in one cache, so that each lab the build and the tests both run
    runs once (site_tests/conftest.py's lab_cache).
    """
    python = shared_venv(session)
    if session.posargs:
        pytest(session, python, *session.posargs)
        return
    pytest(session, python, *FENCE_ARGS, "docs")
    shared = side_by_side(session, 2, python)
    with (
        folder_that_dies_with_nox("lab-records-") as records,
        tempfile.TemporaryFile("w+") as log,
    ):
        shared[SHARED_CACHE_ENV] = records
        labs = start_beside([python, "-m", "pytest", *WITHOUT_SITE], log, shared)
        try:
            pytest(session, python, SITE_TESTS, env=shared)
        finally:
            labs.wait()
            print_log(log)
    if labs.returncode != 0:
        session.error(f"the half without the site failed (pytest exited {labs.returncode})")


# The torch releases the site is checked on: the pinned one, and the two before it. To check
# one more, add it here; `nox -s releases` then builds its venv on first use.
RELEASES = ["2.13.0", "2.14.1", PINNED_TORCH]
# site_tests/ by what a test needs (site_tests/tools/fence_plugin.py refuses a test that needs
# the built site anywhere but in site/):
# - site/: the built site, its pages in a browser, its downloads (the pinned torch only);
# - labs/: a lab, a failure case or an exercise run for real, and the figures and claims drawn
#   from them: the release matrix runs these on every torch, so a new lab's tests join it by
#   being put there;
# - machinery/: the build's own hooks, the fence collector, the gates, the pace (pinned only).
SITE_TESTS = "site_tests/site"
LAB_TESTS = "site_tests/labs"
WITHOUT_SITE = [LAB_TESTS, "site_tests/machinery"]


# What the release matrix leaves out besides: the tests that break a claim on purpose to show
# that its check fails (`teeth` in pyproject.toml), the exercises' starters among them. They
# judge our checks, not torch, and the exercises' six sets of broken solutions alone grade the
# exercises six times over. Each claim itself is still checked on every release.
NOT_TEETH = ["-m", "not teeth"]


@nox.session
@nox.parametrize("torch", RELEASES)
def releases(session, torch):
    """Every fence and every lab's tests on one torch release (all three: nox -s releases)."""
    python = shared_venv(session, torch)
    pytest(session, python, *FENCE_ARGS, "docs")
    pytest(session, python, *NOT_TEETH, *(session.posargs or [LAB_TESTS]))


@nox.session(name="older-releases", default=False)
def older_releases(session):
    """The releases before the pinned one, side by side, as .ci/run runs them after `tests`.

    Much of a lab test is waiting (on a deadline, a daemon, a restart), so the two take little
    more than the slower one. Each writes a log of its own, printed whole when both are done.
    """
    older = [release for release in RELEASES if release != PINNED_TORCH]
    shared = side_by_side(session, len(older), shared_venv(session))
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in older]
        runs = [
            start_beside(
                [sys.executable, "-m", "nox", "-s", f"releases(torch='{release}')"], log, shared
            )
            for release, log in zip(older, logs, strict=True)
        ]
        failed = [release for release, run in zip(older, runs, strict=True) if run.wait() != 0]
        for log in logs:
            print_log(log)
    if failed:
        session.error(f"the matrix failed on torch {', '.join(failed)}")


@nox.session(name="catch-rate", default=False)
def catch_rate(session):
    """Run the checks on the oldest release as if it were the pinned one; count what they catch."""
    python = shared_venv(session, RELEASES[0])
    args = ["--pretend", PINNED_TORCH, *session.posargs]
    session.run(python, "site_tests/tools/catch_rate.py", *args, external=True)


@nox.session
def build(session):
    """Build the site into site/ with `mkdocs build --strict` (labs run or come from cache)."""
    python = shared_venv(session)
    session.run(python, "-m", "mkdocs", "build", "--strict", *session.posargs, external=True)


@nox.session
def serve(session):
    """Serve the site on http://127.0.0.1:8000 with live reload (labs come from cache)."""
    python = shared_venv(session)
    args = session.posargs or ["--dev-addr", "127.0.0.1:8000"]
    env = {name: os.environ.get(name, value) for name, value in SERVE_ENV.items()}
    session.run(python, "-m", "mkdocs", "serve", "--strict", *args, external=True, env=env)


@nox.session
def lint(session):
    """ruff check and ruff format --check over the Python sources."""
    python = shared_venv(session)
    session.run(python, "-m", "ruff", "check", ".", external=True)
    session.run(python, "-m", "ruff", "format", "--check", ".", external=True)


@nox.session
def browser(session):
    """The built site in Chromium at 1400 and 390 px, served gzipped: layout, axe, Lighthouse.

    Each check skips with its reason where its tool is missing (Chromium, nginx, or the npm
    tools that .ci/run installs with `npm ci` from site_tests/tools/package-lock.json).
    """
    python = shared_venv(session)
    pytest(session, python, "site_tests/site/test_browser.py", *session.posargs)


@nox.session
def exercises(session):
    """Grade your exercise files: `-- NAME` grades one (`-- --solutions` grades ours)."""
    python = shared_venv(session)
    session.run(python, "exercises/grade.py", *session.posargs, external=True)


# A CPU hog, pinned to one core: of every tenth of a second it spins the share it is given
# and sleeps the rest, until killed (or until nox dies: die_with_nox).
HOG = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
duty = float(sys.argv[2])
while True:
    end = time.monotonic() + 0.1 * duty
    while time.monotonic() < end:
        pass
    if duty < 1:
        time.sleep(0.1 * (1 - duty))
"""


def hog_duties(cores_busy, cores):
    """{core: share of it to keep busy} for `cores_busy` cores' worth of load, whole cores
    first: 1.5 on two cores is one core spinning and the other spinning half the time."""
    if not 0 < cores_busy < len(cores):
        raise ValueError(f"--cores must be above 0 and below {len(cores)}, not {cores_busy}")
    whole, part = int(cores_busy), cores_busy % 1
    duties = {core: 1.0 for core in cores[:whole]}
    if part:
        duties[cores[whole]] = part
    return duties


@nox.session(name="half-busy", default=False)
def half_busy(session):
    """Run a command with half the machine's cores kept busy: `-- bash .ci/run` by default.

    `-- --cores 1.5 bash .ci/run` takes one and a half cores instead (one hog spinning, one
    spinning half the time), the heavier load the suite must also pass under.
    """
    cores, args = sorted(os.sched_getaffinity(0)), list(session.posargs)
    cores_busy = len(cores) / 2
    if args[:1] == ["--cores"]:
        cores_busy, args = float(args[1]), args[2:]
    duties = hog_duties(cores_busy, cores)
    hogs = [
        subprocess.Popen([sys.executable, "-c", HOG, str(core), str(duty)], preexec_fn=die_with_nox)
        for core, duty in duties.items()
    ]
    session.log(f"{cores_busy:g} of {len(cores)} cores busy ({duties})")
    try:
        session.run(*(args or ["bash", ".ci/run"]), external=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


# The runs only a GPU machine can make (mkdocs.yml's lab_runs with a `recorded:` file and no
# live_if_root): the NCCL lab, chapter 1's CUDA branch and the elastic trainer on one GPU.
GPU_RUNS = ("nccl", "first-job-gpu", "elastic-gpu")


@nox.session(name="record-gpu", default=False)
def record_gpu(session):
    """Run every GPU lab on this GPU machine and write the records their pages embed.

    Uses the shared venv, or the interpreter given after `--` (a GPU node's own torch):
    `nox -s record-gpu -- /usr/bin/python3`.
    """
    python = session.posargs[0] if session.posargs else shared_venv(session)
    for name in GPU_RUNS:
        session.run(python, "hooks/labrunner.py", "record", name, external=True)


@nox.session(default=False)
def links(session):
    """Build the site, then list its external links for an author to check online."""
    python = shared_venv(session)
    session.run(python, "-m", "mkdocs", "build", "--strict", external=True)
    session.run(python, "site_tests/tools/external_links.py", "site", external=True)


@nox.session(default=False)
def figures(session):
    """Time fences, the gloo lab and cold/warm builds side by side with `import torch`."""
    python = shared_venv(session)
    session.run(python, "site_tests/tools/measure_figures.py", external=True)
