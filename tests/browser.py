"""A run's page as a person sees it: headless Chromium (Debian's `chromium`) opens the file from
disk, with nothing to fetch, and gives the DOM once its scripts ran, and a screenshot."""

import re
import shutil
import subprocess
import tempfile

import pytest

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium")


def browse(page, screenshot=None):
    """The DOM of the page at path `page` after its scripts ran; with screenshot (a .png
    path), the picture of it too, 1200 x 1600."""
    with tempfile.TemporaryDirectory() as profile:
        argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", f"--user-data-dir={profile}", "--dump-dom",
                *([f"--screenshot={screenshot}", "--window-size=1200,1600"] if screenshot
                  else []), page.resolve().as_uri()]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120,
                              check=True).stdout


def row(dom, table, first):
    """The cells of the row of table (its id) whose first cell is `first`, and the row's class."""
    body = re.search(rf'<table id="{table}">(.*?)</table>', dom, re.S)[1]
    for attrs, cells in re.findall(r"<tr([^>]*)>(.*?)</tr>", body, re.S):
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", cells, re.S)]
        if cells and cells[0] == str(first):
            return cells, re.sub(r'.*class="([^"]*)".*', r"\1", attrs) if attrs else ""
    raise AssertionError(f"no row {first} in table {table}: {body}")
