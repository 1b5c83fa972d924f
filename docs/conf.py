"""Sphinx configuration: the pages are Markdown (MyST), the API reference is autodoc over spgnn's docstrings.

Build (warnings are errors, as in CI): ``python -m sphinx -W --keep-going -b html docs docs/_build/html``.
"""

import re

import spgnn

project = "spgnn"
release = version = spgnn.__version__
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.mathjax"]
source_suffix = {".md": "markdown"}
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
exclude_patterns = ["_build"]
autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "signature"
html_theme = "alabaster"
html_theme_options = {"page_width": "1180px", "sidebar_width": "240px"}

# The docstrings are plain text with `code` in backticks and math in Unicode (|R_ij|, **options, A*B): outside
# backticks, the characters reStructuredText would read as markup are shown as they are written.
_CODE = re.compile(r"(``.*?``|`[^`]*`)")
_MARKUP = re.compile(r"([|*])")


def _plain(app, what, name, obj, options, lines):
    for k, line in enumerate(lines):
        lines[k] = "".join(part if _CODE.fullmatch(part) else _MARKUP.sub(r"\\\1", part)
                           for part in _CODE.split(line))


def setup(app):
    app.connect("autodoc-process-docstring", _plain)
