"""Each lab's download holds everything it needs: unpacked alone, it runs.

The archives are built by hooks/archives.py from the lab runs' own import graphs, so a lab
that gains an import gains a file in its zip; these tests run the unpacked copies, away from
the repository, to prove it.
"""

import zipfile

import pytest

from site_tests.conftest import run_unpacked

TIMEOUT_S = 55


def unpack(built_site, name, target):
    site, _ = built_site
    with zipfile.ZipFile(site / "downloads" / f"{name}.zip") as archive:
        archive.extractall(target)
    folder = target / name
    assert (folder / "README.md").is_file(), f"{name}.zip has no README"
    return folder


def run_alone(folder, *command):
    return run_unpacked(folder, *command, timeout=TIMEOUT_S)


def test_the_gloo_lab_runs_from_its_download(built_site, tmp_path):
    folder = unpack(built_site, "gloo-lab", tmp_path)
    done = run_alone(folder, "ddp/gloo.py", "--world-size", "2", "--steps", "1")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout


def test_the_nccl_lab_download_holds_what_it_imports(built_site, tmp_path):
    folder = unpack(built_site, "nccl-lab", tmp_path)
    done = run_alone(folder, "ddp/nccl.py", "--help")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", ["first_job/train_single.py", "first_job/train_ddp.py"])
def test_the_first_job_download_holds_both_scripts(built_site, tmp_path, script):
    folder = unpack(built_site, "first-job", tmp_path)
    done = run_alone(folder, script, "--help")
    assert done.returncode == 0, done.stderr
    assert "--checkpoint" in done.stdout


def test_the_two_node_lab_download_holds_what_it_imports_and_what_it_runs(built_site, tmp_path):
    """two_nodes.py imports elastic_train.py and netns.py (its namespaces and teardown),
    and starts store_outsider.py in a namespace."""
    folder = unpack(built_site, "two-nodes-lab", tmp_path)
    needed_files = ("clusters/two_nodes.py", "clusters/elastic_train.py", "lab_cli.py")
    needed_files += ("clusters/store_outsider.py", "clusters/netns.py")
    for needed in needed_files:
        assert (folder / needed).is_file(), f"two-nodes-lab.zip lacks {needed}"
    done = run_alone(folder, "clusters/two_nodes.py", "--help")
    assert done.returncode == 0, done.stderr


def test_the_slurm_lab_download_holds_what_it_imports_and_its_job_scripts(built_site, tmp_path):
    """slurm.py imports netns.py, pace.py, lab_cli.py and provenance.py, and copies
    elastic_train.py, jobs/*.sbatch and jobs/node-env.sh to the cluster's shared folder:
    they travel with it, at the paths it reads them from."""
    folder = unpack(built_site, "slurm-lab", tmp_path)
    needed_files = ("clusters/slurm.py", "clusters/netns.py", "pace.py", "lab_cli.py")
    needed_files += ("provenance.py", "clusters/elastic_train.py", "clusters/jobs/node-env.sh")
    needed_files += ("clusters/jobs/train-torchrun-gpu.sbatch", "clusters/jobs/train-srun-gpu.sbatch")
    for needed in needed_files:
        assert (folder / needed).is_file(), f"slurm-lab.zip lacks {needed}"
    done = run_alone(folder, "clusters/slurm.py", "--help")
    assert done.returncode == 0, done.stderr


def test_the_failure_scripts_run_from_their_download(built_site, tmp_path):
    folder = unpack(built_site, "failure-gallery", tmp_path)
    done = run_alone(folder, "failures/set_epoch.py")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout


def test_the_error_index_reproduces_an_error_from_its_download(built_site, tmp_path):
    folder = unpack(built_site, "error-index", tmp_path)
    done = run_alone(folder, "errors/reproduce.py", "default-pg-not-initialized")
    assert done.returncode == 0, done.stderr
    assert "Default process group has not been initialized" in done.stdout, done.stdout


def test_every_file_a_lab_runs_is_published_beside_its_script(built_site):
    """The lab pages link to site/code/...: a file a lab starts (not imports) is there too."""
    site, _ = built_site
    for name in ("two_nodes.py", "elastic_train.py", "store_outsider.py"):
        assert (site / "code" / "clusters" / name).is_file(), f"site/code/clusters/{name} is missing"
