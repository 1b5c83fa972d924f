"""The documentation cannot fall behind the code: every public name is in the API reference, and the programs the
pages show in full are the files the tests run (algorithms/your_model.py, spgnn/layers/gin.py and the plug-in
algorithm tests/plugin_algorithm.py) or are run themselves, so none of them can rot."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import spgnn

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCKS = [b for page in sorted(DOCS.rglob("*.md")) for b in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)]


def _code(text: str) -> str:
    """The file's code after its module docstring."""
    return re.sub(r'^"""(.*?)"""\n', "", text, flags=re.S).strip()


def _documented() -> list[str]:
    """The names docs/api.md documents: the targets of its autodoc and py: directives."""
    api = (DOCS / "api.md").read_text()
    return re.findall(r"(?:\.\. auto\w+::|\{py:\w+\})\s+spgnn\.(\w+)", api)


def test_api_reference_documents_every_public_name_once():
    documented = _documented()
    assert sorted(set(spgnn.__all__) - set(documented)) == [], "names of spgnn.__all__ missing from docs/api.md"
    assert sorted(set(documented) - set(spgnn.__all__)) == [], "docs/api.md documents names not in spgnn.__all__"
    assert len(documented) == len(set(documented)), "a name documented twice in docs/api.md"


@pytest.mark.parametrize("path", ["algorithms/your_model.py", "spgnn/layers/gin.py", "tests/plugin_algorithm.py"])
def test_docs_show_the_file_as_it_is(path):
    code = _code((ROOT / path).read_text())
    assert any(_code(block) == code for block in BLOCKS), f"the docs' copy of {path} differs from the file"


def test_the_trainer_as_a_library_runs_as_shown(tmp_path):
    """The guide's program around spgnn.Trainer, as written but for fewer epochs and processes (it used run_local,
    whose 120 s deadline ends a longer run)."""
    block = next(b for b in BLOCKS if "spgnn.Trainer(cfg, comm).run(log=None)" in b)
    assert "epochs=100" in block and "nprocs=4" in block          # what is cut down here
    script = tmp_path / "library.py"
    script.write_text(block.replace("epochs=100", "epochs=3").replace("nprocs=4", "nprocs=2"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0 and "'test_acc'" in res.stdout, res.stderr[-2000:]
