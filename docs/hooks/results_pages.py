"""MkDocs hook: the committed benchmark results become part of the site.

Every file under ``benchmarks/results/`` (Markdown tables, CSV, PNG figures, logs) and
``benchmarks/README.md`` (each benchmark, its claim, its latest figure) are added to the site at
the same paths: the Markdown files render as pages and their relative links to each other keep
working. A docs page links a result as it would in the
repository (``../benchmarks/results/bss/table.md`` from ``docs/gallery.md``, which also works
when the page is read on a forge); such links are rewritten to the file's place in the site, and
``benchmarks/README.md``'s links into ``docs/`` to the pages' places.

``docs/gallery.md`` holds the line ``<!-- dpdist:results-index -->`` once; it is replaced by an index
of every results file, folder by folder: each Markdown file with its title, each figure shown, the
other files linked. A results file or figure added later is in the gallery without editing it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

RESULTS = "benchmarks/results"
BENCHMARKS_README = "benchmarks/README.md"
GALLERY = "gallery.md"
INDEX_MARKER = "<!-- dpdist:results-index -->"
_LINK = re.compile(r"(\]\()([^)\s]+)")


def result_files(repo: Path) -> list[Path]:
    """Every file under benchmarks/results (no hidden ones), sorted."""
    folder = repo / RESULTS
    return sorted(p for p in folder.rglob("*") if p.is_file() and not any(s.startswith(".") for s in p.parts))


def site_link(page_uri: str, target: str) -> str:
    """The site's link for a repository link to a result file from the docs page at ``page_uri``."""
    if "://" in target or target.startswith(("#", "/", "mailto:")):
        return target
    path, hash_mark, anchor = target.partition("#")
    page_dir = posixpath.dirname(f"docs/{page_uri}")
    in_repo = posixpath.normpath(posixpath.join(page_dir, path))
    if not (in_repo.startswith(f"{RESULTS}/") or in_repo == BENCHMARKS_README):
        return target
    return posixpath.relpath(f"docs/{in_repo}", page_dir) + hash_mark + anchor


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.name


def results_index(repo: Path) -> str:
    """Markdown for every results file, by folder: the Markdown files with their titles, the figures, the rest."""
    by_folder: dict[str, list[Path]] = {}
    for path in result_files(repo):
        folder = path.parent.relative_to(repo).as_posix()
        by_folder.setdefault(folder, []).append(path)
    lines: list[str] = []
    for folder, paths in by_folder.items():
        lines += [f"### `{folder}/`", ""]
        for path in paths:
            link = f"../{path.relative_to(repo).as_posix()}"
            if path.suffix == ".md":
                lines.append(f"- [{_title(path)}]({link}) (`{path.name}`)")
            elif path.suffix != ".png":
                lines.append(f"- [`{path.name}`]({link})")
        lines.append("")
        for path in paths:
            if path.suffix == ".png":
                link = f"../{path.relative_to(repo).as_posix()}"
                lines += [f"![{path.stem}]({link})", "", f"*`{path.name}`*", ""]
    return "\n".join(lines)


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    repo = Path(config.config_file_path).resolve().parent
    for path in [repo / BENCHMARKS_README, *result_files(repo)]:
        uri = path.relative_to(repo).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, files: Files, **kwargs: Any) -> str:
    if page.file.src_uri.startswith(f"{RESULTS}/"):
        return markdown
    if page.file.src_uri == BENCHMARKS_README:  # its links to the docs, as the repository has them
        return markdown.replace("](../docs/", "](../")
    if page.file.src_uri == GALLERY:
        if markdown.count(INDEX_MARKER) != 1:
            raise ValueError(f"docs/{GALLERY} must hold the line {INDEX_MARKER} exactly once")
        markdown = markdown.replace(INDEX_MARKER, results_index(Path(config.config_file_path).resolve().parent))
    return _LINK.sub(lambda m: m.group(1) + site_link(page.file.src_uri, m.group(2)), markdown)
