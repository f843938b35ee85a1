"""Start-up stays instant: importing the package or the CLI loads no heavy dependency, registries import
only the plug-in asked for, and `reproduce list` loads no model, plotting or learning library.

(The seconds are measured by benchmarks/cli_startup.py; these tests guard what makes them small.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("sklearn", "torch", "transformers", "matplotlib", "scipy", "pandas", "datasets", "sympy", "math_verify")


def loaded_after(code: str, top: bool = True) -> set[str]:
    """Modules (top-level names when ``top``) loaded in a fresh interpreter after running ``code``."""
    names = "m.split('.')[0]" if top else "m"
    probe = code + f"\nimport json, sys\nprint(json.dumps(sorted({{{names} for m in sys.modules if m}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_package_and_cli_import_nothing_heavy():
    loaded = loaded_after("import monkeybarrel, monkeybarrel.orchestrator.cli.main as cli\ncli.build_parser()")
    assert not loaded & set(HEAVY), loaded & set(HEAVY)
    assert not loaded & {"numpy", "pyarrow", "pydantic", "rich"}  # --help and --version need none of them


def test_public_names_load_on_first_use():
    loaded = loaded_after("import monkeybarrel as mb\nassert mb.TaskSpec(name='arithmetic').name == 'arithmetic'\n"
                          "assert 'Experiment' in dir(mb) and 'run' in mb.__all__")
    assert "pydantic" in loaded and not loaded & {"sklearn", "torch", "pandas"}
    assert "monkeybarrel.orchestrator.runner" in loaded_after("import monkeybarrel as mb\n"
                                                              "assert mb.run is mb.run_experiment", top=False)


DEMO = str(Path(__file__).resolve().parents[1] / "monkeybarrel" / "experiments" / "configs" / "demo.yaml")


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["reproduce", "list"], ["reproduce", "no-such-recipe"],
                                  ["validate", "/no/such/config.yaml"], ["validate", DEMO]])
def test_quick_commands_load_nothing_heavy(argv):
    """``validate`` of the demo config (the embedded model, Weaver) included: plug-ins whose modules import
    torch or scikit-learn are checked from their source."""
    code = ("import sys\nfrom monkeybarrel.orchestrator.cli.main import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass")
    heavy = loaded_after(code) & set(HEAVY)
    assert not heavy, f"{argv} loaded {heavy}"


def test_reproduce_list_reads_the_catalog_only():
    """`reproduce list` prints from the recipe catalog: no recipe module, numpy, pyarrow or pydantic."""
    loaded = loaded_after("from monkeybarrel.orchestrator.cli.main import main\nmain(['reproduce', 'list'])",
                          top=False)
    assert not {m.split(".")[0] for m in loaded} & {"numpy", "pyarrow", "pydantic"}
    assert not {m for m in loaded if m.startswith("monkeybarrel.experiments.reproduce.")} - {
        "monkeybarrel.experiments.reproduce.base", "monkeybarrel.experiments.reproduce.catalog",
        "monkeybarrel.experiments.reproduce.command"}


def test_registries_import_only_the_module_asked_for():
    code = ("from monkeybarrel.verifiers.base import VERIFIERS\nfrom monkeybarrel.tasks.base import TASKS\n"
            "from monkeybarrel.core.registry import UnknownNameError\n"
            "assert VERIFIERS.get('length').__name__\nassert TASKS.get('arithmetic')\n"
            "assert 'llm_judge' in VERIFIERS.names() and 'swebench' in TASKS.names()\n"
            "try:\n    VERIFIERS.get('no_such_verifier')\nexcept UnknownNameError as exc:\n"
            "    assert 'llm_judge' in str(exc)\n"
            "import sys\nprint(sorted(m for m in sys.modules if m.startswith(('monkeybarrel.verifiers.', "
            "'monkeybarrel.tasks.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    imported = set(eval(out.splitlines()[-1]))  # noqa: S307 — our own printed list
    assert {"monkeybarrel.verifiers.heuristics", "monkeybarrel.tasks.arithmetic"} <= imported
    assert not imported & {"monkeybarrel.verifiers.llm_judge", "monkeybarrel.verifiers.reward_model",
                           "monkeybarrel.tasks.swebench", "monkeybarrel.tasks.humaneval"}, imported


REPORT_RUNNER = """
import json, sys
blocked = set(json.loads(sys.argv[2]))

class Unimportable:  # as if these packages were not installed
    def find_spec(self, name, path=None, target=None):
        if name in blocked or name.split(".")[0] in blocked:
            raise ImportError(f"{name} is blocked")
        return None

sys.meta_path.insert(0, Unimportable())
from monkeybarrel.orchestrator.cli.main import main
status = main(["report", sys.argv[1]])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""

NOT_FOR_REPORT = {"sklearn", "scipy", "pyarrow.dataset", "pyarrow._dataset", "pyarrow.acero"}
"""What `report` of a majority-vote store must not load: scikit-learn (selectors keep its estimator contract
without it), scipy (pass@k's log-gamma is ``math.lgamma``; the allocation replay loads only when it runs),
Arrow's dataset reader and query engine (the store reads files with ParquetFile and answers key questions
with sorted codes, ``core/keys.py``)."""


def _report(directory: Path, blocked: set[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", REPORT_RUNNER, str(directory), json.dumps(sorted(blocked))],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_report_loads_no_scikit_learn_and_needs_no_pandas_or_arrow_dataset(tmp_path):
    """`monkeybarrel report` of a store with the default selectors (majority, random, oracle): none of
    NOT_FOR_REPORT is imported; and with those and pandas made unimportable (pyarrow imports pandas for
    its conversions whenever it is installed, but works without it), the report is the same, file for file."""
    from test_orchestrator_results import synthetic_store

    free, blocked = synthetic_store(tmp_path / "free", problems=12, samples=4), tmp_path / "blocked"
    shutil.copytree(free, blocked)
    report = _report(free, set())
    assert report["status"] == 0 and not NOT_FOR_REPORT & set(report["modules"]), NOT_FOR_REPORT & set(report["modules"])
    without = _report(blocked, NOT_FOR_REPORT | {"pandas"})
    assert without["status"] == 0 and "pandas" not in without["modules"]
    for name in ("selections.parquet", "metrics.json", "report.md", "coverage.png"):
        assert (free / name).read_bytes() == (blocked / name).read_bytes(), name
