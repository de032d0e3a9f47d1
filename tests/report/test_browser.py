"""The report as a person sees it: opened in headless Chromium, its script ran without an error,
its charts drawn, its screenshot not blank. Chromium must be installed (CI installs it); set
JAXEVAL_SKIP_BROWSER=1 to skip these on a machine without it."""

from __future__ import annotations

import re

from PIL import Image

from jaxeval.report import compare_runs, load_runs, write_report
from jaxeval.report.assets import ERROR_HOOK
from tests.helpers.browser import open_page, screenshot

BLUE = (0x00, 0x72, 0xB2)  # the first run's colour (jaxeval.report.svg.PALETTE)


def test_report_in_a_browser(lm_eval_dir, jaxeval_b_dir, tmp_path):
    runs = load_runs([str(lm_eval_dir), str(jaxeval_b_dir)])
    html = write_report(runs, tmp_path / "report.html")
    page = open_page(html, tmp_path / "chromium")
    flips = sum(len(f) for f in compare_runs(*runs).flips.values())
    root = re.search(r"<html[^>]*>", page.dom).group(0)  # the attributes the page's script set
    assert 'data-report-ready="1"' in root and "data-errors" not in root, (root, page.console)
    assert '<pre id="report-errors" hidden=""></pre>' in page.dom
    assert not any("error" in m.lower() for m in page.console), page.console
    status = re.search(r'<span id="report-status">([^<]*)</span>', page.dom).group(1)
    assert status == f"ready: 4 charts, {flips} flipped documents listed"
    assert page.dom.count('class="bar"') == 8 and page.dom.count('class="err"') == 8
    assert "<img" not in page.dom and "fake-model-b" in page.dom

    png = screenshot(html, tmp_path / "report.png", tmp_path / "chromium", width=1200, height=1600)
    image = Image.open(png).convert("RGB")
    assert image.size == (1200, 1600)
    colors = image.getcolors(maxcolors=1 << 20)
    assert len(colors) > 50  # text, tables and charts, not an empty page
    assert sum(n for n, c in colors if c == BLUE) > 500  # the first run's bars were painted


def test_a_script_error_would_be_seen(tmp_path):
    """The checks above can fail: with the report's own error hook, a script that throws shows in
    the DOM (`data-errors`, `#report-errors`) and in the console."""
    page_file = tmp_path / "broken.html"
    page_file.write_text(
        f"<!DOCTYPE html><html><head><script>{ERROR_HOOK}</script></head><body>"
        "<pre id='report-errors' hidden></pre><script>missingFunction();</script></body></html>"
    )
    page = open_page(page_file, tmp_path / "chromium")
    error = "Uncaught ReferenceError: missingFunction is not defined"
    assert f'data-errors="script error: {error}"' in re.search(r"<html[^>]*>", page.dom).group(0)
    assert re.search(r'<pre id="report-errors">script error: ' + error, page.dom)
    assert any(error in m for m in page.console)
