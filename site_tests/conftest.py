"""Fixtures shared across the suite."""

import importlib.util
import io
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

import psutil
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARCHIVES_HOOK = ROOT / "hooks" / "archives.py"  # zips the downloads; tests build with it
sys.path.insert(0, str(ROOT / "code"))
import pace  # noqa: E402  (every time limit below is written for its reference machine)

sys.path.insert(0, str(ROOT / "hooks"))
import labrunner  # noqa: E402  (how the build runs a lab and keeps its record)

# The temporary folder this process started with: the session's guarded folder is made in it,
# and then becomes every process's TMPDIR (pytest_configure).
START_TMP = tempfile.gettempdir()
BUILD_TIMEOUT = 600  # seconds: a cold build runs every lab, each with its own timeout
# The npm tools of the browser and markup tests: site_tests/tools/package.json pins them, its
# lock pins what they pull in, and .ci/run installs them with `npm ci` into this folder outside
# the checkout.
NPM_DIR = pathlib.Path(
    os.environ.get("DDP_COURSE_NPM", pathlib.Path.home() / ".cache" / "ddp-course" / "npm")
)
NPM_PACKAGE = ROOT / "site_tests" / "tools" / "package.json"


def pytest_report_header():
    """The run's one measurement, in its log: every limit below is stretched by this factor."""
    seconds, factor = pace.import_seconds(), pace.factor()
    return f"pace: import torch counted as {seconds:.2f} s (code/pace.py); limits x{factor:.2f}"


def pytest_collection_modifyitems(config, items):
    """Every test's pytest-timeout (its own mark, else --timeout or the ini's), stretched for
    this machine."""
    default = config.getoption("timeout") or config.getini("timeout")
    for item in items:
        mark = item.get_closest_marker("timeout")
        written = mark.args[0] if mark and mark.args else float(default)
        item.add_marker(pytest.mark.timeout(pace.limit(written)), append=False)


def pytest_terminal_summary(terminalreporter):
    """The Lighthouse table, if the browser tests made one (site_tests/tools/lighthouse_gate.py)."""
    gate = sys.modules.get("site_tests.tools.lighthouse_gate")
    if gate is not None and gate.summary:
        terminalreporter.section("Lighthouse, calibrated to this machine")
        for line in gate.summary:
            terminalreporter.write_line(line)


def declared():
    """mkdocs.yml's `extra`, every value a string as the hooks read it: the lab runs (`lab_runs`)
    and the downloads (`archives`)."""
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)["extra"]


def mkdocs_build(config, site_dir, cache_dir, timeout=BUILD_TIMEOUT):
    """`mkdocs build --strict` of `config` into `site_dir`, with labs cached in `cache_dir`.

    `timeout`, like every limit a test passes here, is written for pace's reference machine.
    """
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
        timeout=pace.limit(timeout),
        env=env,
        cwd=config.parent,
    )


def run_unpacked(folder, *command, timeout, hide=("PYTHONPATH",)):
    """Run `python COMMAND` in an unpacked download, with none of the course's setup around.

    `hide` names environment variables the repository's own runs rely on and a reader who
    downloaded the folder would not have. `timeout` is written for pace's reference machine.
    """
    env = {key: value for key, value in os.environ.items() if key not in hide}
    return subprocess.run(
        [sys.executable, *command],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=pace.limit(timeout),
    )


def npm_tool(name):
    """The pinned npm tool's folder under NPM_DIR, or skip saying how to install it."""
    pinned = json.loads(NPM_PACKAGE.read_text())["dependencies"][name]
    folder = NPM_DIR / "node_modules" / name
    pins = NPM_PACKAGE.relative_to(ROOT).with_name("package*.json")
    install = f"cp {pins} {NPM_DIR} && npm ci --prefix {NPM_DIR}"
    if not (folder / "package.json").is_file():
        pytest.skip(f"{name} is not installed under {NPM_DIR} ({install})")
    version = json.loads((folder / "package.json").read_text())["version"]
    if version != pinned:
        pytest.skip(f"{name} {version} is installed, {pinned} is pinned ({install})")
    return folder


def processes_naming(text):
    """{pid: argv} of every process whose command line holds `text`. One that ends while we
    look is left out, and so is a zombie (its command line is empty): neither runs."""
    return {
        proc.pid: proc.info["cmdline"]
        for proc in psutil.process_iter(["cmdline"])
        if text in " ".join(proc.info["cmdline"] or ())
    }


def alive(pid):
    """Whether `pid` is a live process. A zombie is not: a process killed after its parent
    exited is collected by whoever inherited it, when that one gets to it, and a lab's runner
    waits for that only a while (labrunner.kill_leftovers)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # gone, or a zombie psutil could not read
        return False


GUARDIAN_KEY = pytest.StashKey[subprocess.Popen]()
GUARDED_KEY = pytest.StashKey[pathlib.Path]()
# What the guardian runs: it waits for its stdin to close, which happens when the test session
# ends however it ends (a SIGKILL included: the kernel closes the pipe), then kills every process
# whose command line names the guarded folder, with its process group (an nginx worker's command
# line names nothing, and it outlives a killed master), and removes the folder.
GUARDIAN = r"""
import os, shutil, signal, sys
import psutil
folder, spared = sys.argv[1], {os.getpgid(0), int(sys.argv[2])}  # its own group, the session's
sys.stdin.read()
for proc in psutil.process_iter(["cmdline"]):
    if proc.pid == os.getpid() or folder not in " ".join(proc.info["cmdline"] or ()):
        continue
    try:  # one that ends as we look is one less to kill
        group = os.getpgid(proc.pid)
        if group not in spared:
            os.killpg(group, signal.SIGKILL)
        proc.kill()
    except (OSError, psutil.Error):
        pass
shutil.rmtree(folder, ignore_errors=True)
"""


def pytest_configure(config):
    """Give the session a guarded temporary folder, and make it every process's TMPDIR.

    What the tests start keeps its temporary files there (torchrun's torchelastic_* folders,
    Chromium's sockets, a lab's scratch), and so does this process; pytest's own tmp_path stays
    where pytest keeps it. A guardian outside the test session's process group holds a pipe from
    this process: when the session ends, normally or killed, it kills every process that names
    the folder in its command line and removes the folder, so that nothing outlives a killed run.
    """
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", START_TMP)
    # Short names all the way down: Chromium's singleton socket lives in its TMPDIR, in here,
    # and a Unix socket's path may not pass 107 bytes.
    folder = tempfile.mkdtemp(prefix="guarded-")
    config.stash[GUARDED_KEY] = pathlib.Path(folder)
    config.stash[GUARDIAN_KEY] = subprocess.Popen(
        [sys.executable, "-c", GUARDIAN, folder, str(os.getpgid(0))],
        stdin=subprocess.PIPE,
        start_new_session=True,  # a kill of the session's process group spares it
    )
    os.environ["TMPDIR"] = tempfile.tempdir = folder


def pytest_unconfigure(config):
    guardian = config.stash[GUARDIAN_KEY]
    guardian.stdin.close()
    guardian.wait(timeout=pace.limit(30))


@pytest.fixture(scope="session")
def guarded_folder(pytestconfig):
    """The session's guarded folder (pytest_configure): start each server or browser with it in
    its command line (nginx's prefix, a browser's profile, a tool's output path)."""
    return pytestconfig.stash[GUARDED_KEY]


@pytest.fixture(scope="session")
def lab_cache(tmp_path_factory):
    """The lab cache of this test session, empty when it starts: every record in it comes from
    a run of this session. Under `nox -s tests` both halves get the same one
    (labrunner.SHARED_CACHE_ENV), and labrunner.load_record runs each lab once for the two: the
    build and a test that both want a run wait for whichever asked first."""
    shared = os.environ.get(labrunner.SHARED_CACHE_ENV)
    return pathlib.Path(shared) if shared else tmp_path_factory.mktemp("labs")


@pytest.fixture(scope="session")
def lab_record(lab_cache):
    """lab_record(NAME): the record of mkdocs.yml's lab run NAME, exactly as the build runs it,
    from this session's lab cache (run now if no one has yet)."""
    runs = declared()["lab_runs"]

    def record(name):
        return labrunner.load_record(labrunner.LabRun(name, runs[name], ROOT), lab_cache)

    return record


@pytest.fixture(scope="session")
def built_site(tmp_path_factory, lab_cache):
    """The real site, built once per test session: (site, cache).

    Its lab cache is this session's (lab_cache), so the pages show this session's runs and the
    tests can compare them with the records the runs left in `cache`.
    """
    site = tmp_path_factory.mktemp("build") / "site"
    proc = mkdocs_build(ROOT / "mkdocs.yml", site, lab_cache)
    assert proc.returncode == 0, f"mkdocs build failed:\n{proc.stdout}\n{proc.stderr}"
    return site, lab_cache


@pytest.fixture(scope="session")
def exercises_download(tmp_path_factory):
    """The exercises download as a learner unpacks it: the zip that hooks/archives.py makes
    from mkdocs.yml's declaration, extracted (a folder named `exercises`). No site is built."""
    spec = importlib.util.spec_from_file_location("archives_under_test", ARCHIVES_HOOK)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    extra = declared()
    archive = hook.Archive("exercises", extra["archives"]["exercises"], ROOT, extra["lab_runs"])
    folder = tmp_path_factory.mktemp("download")
    with zipfile.ZipFile(io.BytesIO(archive.data)) as opened:
        opened.extractall(folder)
    return folder / "exercises"


@pytest.fixture
def one_rank_group():
    """A one-rank gloo group in this process (on a HashStore), destroyed after the test."""
    import torch.distributed as dist  # loaded when a test asks for the group

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def torch_refuses(tmp_path_factory):
    """A folder with a `torch` package that fails on import, to put first on PYTHONPATH."""
    folder = tmp_path_factory.mktemp("no-torch")
    (folder / "torch").mkdir()
    (folder / "torch" / "__init__.py").write_text(
        "raise ImportError('torch imported before the arguments were checked')\n"
    )
    return folder
