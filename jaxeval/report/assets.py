"""The report page's own style and script, inlined into every report (nothing is fetched).

The first script records any error in `#report-errors` (and `data-errors` on <html>), so a
headless browser's DOM shows it; the last marks the page `data-report-ready="1"` once it ran and
wires the filter boxes (documents by text, tests by p-value).
"""

CSS = """
:root { --fg: #1d2330; --muted: #5b6472; --line: #d8dde6; --bg-alt: #f5f7fa; --sig: #fff3c4; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       margin: 0 auto; max-width: 1280px; padding: 18px 28px 60px; }
h1 { font-size: 24px; margin: 4px 0; } h2 { font-size: 19px; margin: 30px 0 8px;
     border-bottom: 2px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.muted, .tick { color: var(--muted); }
nav, .legend { display: flex; flex-wrap: wrap; gap: 4px 16px; }
.scroll { max-width: 100%; overflow-x: auto; margin: 6px 0 12px; }
table { border-collapse: collapse; margin: 6px 0 12px; }
.scroll > table { margin: 0; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 9px; text-align: left;
         vertical-align: top; }
th { background: var(--bg-alt); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.best { font-weight: 700; }
table.runs { width: 100%; }
table.runs td { overflow-wrap: break-word; }
table.runs td.path { max-width: 240px; } table.runs td.settings { max-width: 220px; }
table.runs td.date { white-space: nowrap; }
table.results th.run { overflow-wrap: break-word; }
table.results th, table.results td { padding: 3px 6px; }
td.value { white-space: normal; } td.value .v, td.value .se { white-space: nowrap; }
td.value .se { color: var(--muted); }
table.runs th:first-child { width: 12em; }
tr.sig td { background: var(--sig); }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px;
          margin-right: 6px; vertical-align: -1px; }
.charts { display: flex; flex-wrap: wrap; gap: 10px 18px; }
svg.chart { background: #fff; border: 1px solid var(--line); border-radius: 4px; }
svg .chart-title { font-size: 12px; font-weight: 600; fill: var(--fg); }
svg .tick { font-size: 10px; fill: var(--muted); }
svg .value { font-size: 10px; fill: var(--fg); }
svg .grid { stroke: #eceff4; } svg .axis { stroke: #9aa3b1; }
svg .err line { stroke: #222; stroke-width: 1.3; }
.legend span { overflow-wrap: anywhere; }
details.task { border: 1px solid var(--line); border-radius: 6px; margin: 8px 0;
               padding: 4px 10px; }
details.task > summary { cursor: pointer; font-weight: 600; padding: 4px 0; }
.flip { border-top: 1px dashed var(--line); padding: 8px 0; }
.flip-head { font-weight: 600; }
.gain { color: #1a7f37; } .loss { color: #c62828; }
pre { white-space: pre-wrap; word-break: break-word; background: var(--bg-alt);
      padding: 6px 8px; border-radius: 4px; margin: 4px 0; max-height: 260px; overflow: auto; }
td.pick-a { box-shadow: inset 3px 0 0 #0072b2; } td.pick-b { box-shadow: inset -3px 0 0 #e69f00; }
.gold { color: #1a7f37; font-weight: 700; }
input[type=search] { padding: 4px 8px; width: 320px; margin: 4px 0 8px; }
.note { background: #fff8e1; border-left: 3px solid #f0b400; padding: 4px 10px; margin: 4px 0; }
#report-errors { color: #b00020; font-weight: 600; }
"""

ERROR_HOOK = """
window.addEventListener("error", function (event) {
  var box = document.getElementById("report-errors");
  var text = "script error: " + (event.message || event.type);
  document.documentElement.setAttribute("data-errors", text);
  if (box) { box.hidden = false; box.textContent += text + "\\n"; }
});
"""

MAIN = """
(function () {
  function filterFlips(input) {
    var words = input.value.toLowerCase().split(/\\s+/).filter(Boolean);
    var scope = document.getElementById(input.dataset.scope);
    var shown = 0;
    scope.querySelectorAll(".flip").forEach(function (flip) {
      var text = flip.textContent.toLowerCase();
      var keep = words.every(function (w) { return text.indexOf(w) >= 0; });
      flip.hidden = !keep;
      if (keep) { shown += 1; }
    });
    var out = document.getElementById(input.dataset.scope + "-count");
    if (out) { out.textContent = shown + " shown"; }
  }
  document.querySelectorAll("input.flip-filter").forEach(function (input) {
    input.addEventListener("input", function () { filterFlips(input); });
  });
  document.querySelectorAll("input.sig-only").forEach(function (box) {
    box.addEventListener("change", function () {
      document.querySelectorAll("#" + box.dataset.scope + " tbody tr").forEach(function (row) {
        row.hidden = box.checked && !row.classList.contains("sig");
      });
    });
  });
  var charts = document.querySelectorAll("svg.chart").length;
  var flips = document.querySelectorAll(".flip").length;
  var status = document.getElementById("report-status");
  status.textContent = "ready: " + charts + " charts, " + flips + " flipped documents listed";
  document.documentElement.setAttribute("data-report-ready", "1");
})();
"""
