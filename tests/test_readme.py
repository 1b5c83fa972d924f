"""The README's programs are the files the tests run: the model of one's own (algorithms/your_model.py) and the
layer that is one file (spgnn/layers/gin.py) stand in the README exactly as they are, so neither can rot."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def _code(text: str) -> str:
    """The file's code after its module docstring."""
    return re.sub(r'^"""(.*?)"""\n', "", text, flags=re.S).strip()


@pytest.mark.parametrize("path", ["algorithms/your_model.py", "spgnn/layers/gin.py"])
def test_readme_shows_the_file_as_it_is(path):
    code = _code((ROOT / path).read_text())
    assert any(_code(block) == code for block in BLOCKS), f"README's copy of {path} differs from the file"
