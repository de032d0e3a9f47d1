"""The report's layout measured in headless Chromium, at a window width: does the page get wider
than the window, and do any two texts of a chart overlap.

    layout = measure(Path("report.html"), tmp_path, width=1280)
    layout["body_width"] <= layout["window_width"]     document.body.scrollWidth, innerWidth
    layout["overlaps"] == []                           [chart title, text, text] per overlap

A copy of the page gets a script at its end that measures (getBoundingClientRect of every <text>
of every svg.chart, pairwise) and writes the numbers as JSON into a <pre id="layout-check">;
the DOM Chromium dumps is read back.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from tests.helpers.browser import open_page

MEASURE = """
<script>
(function () {
  function box(e) { var r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }
  function apart(a, b) { return a[2] <= b[0] || b[2] <= a[0] || a[3] <= b[1] || b[3] <= a[1]; }
  var overlaps = [], texts = 0;
  var charts = document.querySelectorAll("svg.chart");
  charts.forEach(function (svg) {
    var items = Array.prototype.map.call(svg.querySelectorAll("text"), function (t) {
      return [t.textContent, box(t)];
    });
    texts += items.length;
    var title = svg.querySelector("title") ? svg.querySelector("title").textContent : "";
    for (var i = 0; i < items.length; i++) {
      for (var j = i + 1; j < items.length; j++) {
        if (!apart(items[i][1], items[j][1])) { overlaps.push([title, items[i][0], items[j][0]]); }
      }
    }
  });
  var out = {
    body_width: document.body.scrollWidth,
    page_width: document.documentElement.scrollWidth,
    window_width: window.innerWidth,
    charts: charts.length,
    texts: texts,
    values: document.querySelectorAll("svg.chart text.value").length,
    overlaps: overlaps,
  };
  var pre = document.createElement("pre");
  pre.id = "layout-check";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def measure(page: Path, scratch: Path, *, width: int = 1280) -> dict:
    """The layout numbers of the module docstring, and the DOM (`dom`)."""
    copy = scratch / f"measured_{page.name}"
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"))
    opened = open_page(copy, scratch / "chromium", width=width)
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', opened.dom, re.S)
    assert found, (opened.console, opened.dom[-2000:])
    return {**json.loads(html.unescape(found.group(1))), "dom": opened.dom}
