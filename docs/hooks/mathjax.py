"""MkDocs hook: MathJax from a Python package, so formulas render without a network.

``pymdownx.arithmatex`` (generic mode) leaves ``$...$`` and ``$$...$$`` as TeX inside
``.arithmatex`` elements; MathJax 3 typesets them in the reader's browser. The script is the
self-contained SVG build, ``es5/tex-svg.js`` (its glyphs are paths, no font files), shipped by
the PyPI package ``django-static-mathjax`` (MathJax 3.2.2 as static files; no Django needed).
This hook adds that file to the site as ``javascripts/mathjax/tex-svg.js``, which mkdocs.yml
loads after ``javascripts/mathjax-config.js``: nothing is fetched from a CDN.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

SITE_PATH = "javascripts/mathjax/tex-svg.js"


def mathjax_script() -> Path:
    """The path of MathJax's ``tex-svg.js`` inside the installed ``django-static-mathjax``."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the docs need django-static-mathjax (pip install -e '.[test]')")
    for folder in spec.submodule_search_locations:
        script = Path(folder) / "static" / "mathjax" / "es5" / "tex-svg.js"
        if script.is_file():
            return script
    raise FileNotFoundError("django-static-mathjax is installed but has no static/mathjax/es5/tex-svg.js")


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, SITE_PATH, abs_src_path=str(mathjax_script())))
    return files
