"""The documentation: README.md, docs/*.md and benchmarks/README.md link only to files and
headings that exist, every page is linked from the README, and the option tables are the
`request` table of roles/launch/meta/argument_specs.yml."""

import re

from tests.unit.plugins import REQUEST_SPEC, ROOT
from tools import option_table

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks/README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page):
    """GitHub's ids of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in page.read_text().splitlines() if line.startswith("#")}


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if "://" in target:
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists() or anchor and anchor not in anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken


def test_every_page_is_linked_from_the_readme():
    linked = {(ROOT / target.partition("#")[0]).resolve()
              for target in LINK.findall(README.read_text())}
    assert [page.relative_to(ROOT) for page in PAGES[1:] if page not in linked] == []


def test_the_option_table_is_the_request_table():
    page = option_table.PAGE.read_text()
    assert page == option_table.page(page, REQUEST_SPEC), (
        "docs/training.md's option table differs from the request options of "
        "roles/launch/meta/argument_specs.yml: run .venv/bin/python -m tools.option_table")


def test_the_readme_options_are_train_yml_options_with_their_defaults():
    train = README.read_text().partition("\n## Train\n")[2].partition("\n## ")[0]
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \|", train, re.MULTILINE)
    assert len(rows) == 10
    for name, shown in rows:
        assert name in REQUEST_SPEC
        assert shown.startswith(option_table.default(name, REQUEST_SPEC[name]) or shown), name
