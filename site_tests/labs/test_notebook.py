"""The notebook page: hooks/notebooks.py executes docs/notebooks/*.ipynb, mkdocs-jupyter renders.

The notebook is executed once for the module, the way the build does it (a process of its own,
a timeout per cell and for the whole notebook). The executed copy must hold the real
`mp.spawn` error in the one cell tagged `raises-exception`, the torchrun and fork outputs, and
no other error; an untagged failing cell must fail the run; the cache key must follow the
torch version; and the built page must show all of it, with the notebook to download.
"""

import json
import sys

import nbformat
import pytest
from mkdocs.exceptions import PluginError

from site_tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "hooks"))
import notebooks  # noqa: E402

NOTEBOOK = ROOT / "docs" / "notebooks" / "ddp-from-a-notebook.ipynb"
SPAWN_ERROR = "Can't get attribute 'worker' on <module '__main__'"

pytestmark = pytest.mark.timeout(2 * notebooks.NOTEBOOK_TIMEOUT_S)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    path = notebooks.executed_copy(NOTEBOOK, tmp_path_factory.mktemp("nb-cache"))
    return nbformat.read(path, as_version=4)


def outputs_text(cell):
    """What a cell's outputs say: stream text as printed, each traceback line on its own."""
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        parts += [line + "\n" for line in output.get("traceback", [])]
    return "".join(parts)


def code_cells(nb):
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def test_only_the_tagged_cell_errored(executed):
    errored = [
        cell for cell in code_cells(executed) if any(o.output_type == "error" for o in cell.outputs)
    ]
    assert len(errored) == 1
    assert notebooks.EXPECTED_ERROR_TAG in errored[0].metadata["tags"]
    assert "mp.spawn(worker" in errored[0].source


def test_spawn_cell_shows_the_real_error(executed):
    spawn = code_cells(executed)[0]
    text = outputs_text(spawn)
    assert SPAWN_ERROR in text
    error = next(o for o in spawn.outputs if o.output_type == "error")
    assert error.ename == "ProcessExitedException"
    assert error.traceback == [f"{error.ename}: {error.evalue}"]  # trimmed to its message


def test_torchrun_cell_ran_two_ranks(executed):
    cell = next(c for c in code_cells(executed) if c.source.startswith("!torchrun"))
    text = outputs_text(cell)
    for rank in (0, 1):
        assert f"rank {rank} of 2: all_reduce gives 3" in text


def test_fork_cell_ran_two_ranks_without_cuda(executed):
    cell = next(c for c in code_cells(executed) if 'start_method="fork"' in c.source)
    text = outputs_text(cell)
    for rank in (0, 1):
        assert f"forked rank {rank} " in text and "all_reduce gives 3" in text
    assert "the kernel never initialised CUDA: True" in text


def test_no_traceback_survives(executed):
    assert "Traceback (most recent call last)" not in json.dumps(executed)


def test_untagged_error_fails_the_run(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    broken = tmp_path / "broken.ipynb"
    nbformat.write(nb, broken)
    with pytest.raises(PluginError, match="ZeroDivisionError"):
        notebooks.executed_copy(broken, tmp_path / "cache")


def test_a_line_printed_in_pieces_shows_whole(tmp_path):
    # The kernel sends printed text as its output thread flushes it: a flush in mid-line
    # (here forced) gives two outputs, and the page would break the line where it fell.
    source = 'import sys\nsys.stdout.write("half a line, ")\nsys.stdout.flush()\nprint("whole")'
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    pieces = tmp_path / "pieces.ipynb"
    nbformat.write(nb, pieces)
    executed = nbformat.read(notebooks.executed_copy(pieces, tmp_path / "cache"), as_version=4)
    outputs = [(o.output_type, o.text) for o in executed.cells[0].outputs]
    assert outputs == [("stream", "half a line, whole\n")]


def test_cache_key_follows_torch_and_the_notebook(monkeypatch, tmp_path):
    key = notebooks.cache_key(NOTEBOOK)
    copy = tmp_path / NOTEBOOK.name
    copy.write_bytes(NOTEBOOK.read_bytes().replace(b"is alive", b"is here"))
    assert notebooks.cache_key(copy) != key
    monkeypatch.setattr(notebooks.labrunner, "installed_torch", lambda: "0.0.1")
    assert notebooks.cache_key(NOTEBOOK) != key
