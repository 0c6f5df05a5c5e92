"""hooks/views/: one registry assembled from an explicit list of families, and a lab page's
"shown first" code declared with its run in mkdocs.yml, never guessed from the code.

Nothing here runs a lab or builds the site: the registry is read as the build reads it, and the
source view is rendered from the lab sources as they are.
"""

import pkgutil
import re
import sys
import types

import pytest
import yaml
from mkdocs.exceptions import PluginError

from site_tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "hooks"))
import labrunner  # noqa: E402
import labs  # noqa: E402
import views  # noqa: E402
from views.common import Context  # noqa: E402
from views.source import shown_first  # noqa: E402

DDP_LAB = "code/ddp/ddp_common.py"
TRAINING = "Training: one loop, three ways to keep replicas in step"


def declared_runs():
    """mkdocs.yml's lab runs, read as `python hooks/labrunner.py record` reads them."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    return config["extra"]["lab_runs"]


def gloo_run():
    return labrunner.LabRun("gloo", declared_runs()["gloo"], ROOT)


def family(name, **tables):
    return types.SimpleNamespace(__name__=name, **tables)


# ---------------------------------------------------------------------------------------------
# One registry, built explicitly
# ---------------------------------------------------------------------------------------------
def test_a_name_registered_by_two_families_fails():
    first = family("views.first", VIEWS={"results": print, "sweep": print})
    second = family("views.second", VIEWS={"results": repr})
    with pytest.raises(PluginError, match=r"'results' is registered by both views\.first and "):
        views.table([first, second], "VIEWS")
    assert views.table([first], "VIEWS") == {"results": print, "sweep": print}


def test_a_drawing_registered_twice_fails_as_a_view_does():
    with pytest.raises(PluginError, match="DRAWINGS 'sampler-split'"):
        views.table(
            [
                family("a", DRAWINGS={"sampler-split": print}),
                family("b", DRAWINGS={"sampler-split": repr}),
            ],
            "DRAWINGS",
        )


def test_every_module_of_the_package_with_views_is_a_listed_family():
    """A family left out of FAMILIES would register nothing: its markers would fail the build
    as unknown, or its views would quietly be missing from the tests that read the registry."""
    listed = {family.__name__ for family in views.FAMILIES}
    for module in pkgutil.iter_modules(views.__path__):
        imported = __import__(f"views.{module.name}", fromlist=["_"])
        if any(hasattr(imported, table) for table in ("VIEWS", "DRAWINGS", "FIGURES")):
            assert imported.__name__ in listed, f"{imported.__name__} is not in views.FAMILIES"


def test_importing_a_family_registers_nothing():
    """The registry is views.VIEWS alone; a family's table is a plain dict of its own."""
    from views import slurm

    assert set(slurm.VIEWS) <= set(views.VIEWS)
    assert views.table([slurm], "VIEWS") == slurm.VIEWS
    assert not hasattr(slurm, "view") and not hasattr(views, "view")


# ---------------------------------------------------------------------------------------------
# What a lab page shows first: declared
# ---------------------------------------------------------------------------------------------
def test_the_ddp_labs_declare_their_training_section():
    runs = declared_runs()
    for name in ("gloo", "nccl"):
        assert runs[name]["shown_first"] == {DDP_LAB: TRAINING}
        ((path, title, code),) = shown_first(
            labrunner.LabRun(name, runs[name], ROOT), {DDP_LAB: TRAINING}
        )
        assert path == ROOT / DDP_LAB and title == TRAINING and "DistributedDataParallel(" in code


def test_a_declared_section_that_does_not_exist_fails_the_build():
    declared = declared_runs()
    declared["gloo"] = dict(declared["gloo"], shown_first={DDP_LAB: "Training, renamed"})
    config = types.SimpleNamespace(
        config_file_path=str(ROOT / "mkdocs.yml"),
        extra={"lab_runs": declared},
        docs_dir=ROOT / "docs",
    )
    with pytest.raises(
        PluginError, match=r"'gloo'.*'Training, renamed' of code/ddp/ddp_common\.py"
    ):
        labs.on_config(config)


def test_a_declared_module_the_script_does_not_import_fails():
    with pytest.raises(PluginError, match=r"names 'code/pace\.py', which its script does not"):
        shown_first(gloo_run(), {"code/pace.py": TRAINING})


def first_fence_title(markdown):
    return re.search(r'^```python title="([^"]+)"', markdown, re.MULTILINE)[1]


def source_page(run, sections):
    views.source.SHOWN_ON_PAGE.clear()
    context = Context(run=run, record=None, page_uri="labs/test.md", shown_first=sections)
    return views.render("source", context)


def test_the_source_view_shows_what_is_declared_first_and_folds_the_script():
    run = gloo_run()
    declared = source_page(run, shown_first(run, {DDP_LAB: TRAINING}))
    assert first_fence_title(declared) == f"{DDP_LAB}: {TRAINING}"
    assert "<summary>code/ddp/gloo.py</summary>" in declared
    assert f"# ({TRAINING}: shown above.)" in declared
    # Another section declared is shown first instead: the declaration decides, not the code.
    timing = source_page(run, shown_first(run, {DDP_LAB: "Timing"}))
    assert first_fence_title(timing) == f"{DDP_LAB}: Timing"
    # Nothing declared: the script itself comes first.
    assert first_fence_title(source_page(run, [])) == "code/ddp/gloo.py"
