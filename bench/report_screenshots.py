"""docs/report_sweep.png and docs/report_n_shot.png: `jaxeval report` in headless Chromium, 1280 px.

    PYTHONPATH=. python bench/report_screenshots.py [--out docs/]

The runs are tests/report/synthetic.py's, in lm-eval's file layout with made-up numbers: seven
checkpoints of one training run under a long absolute path (steps 1000 to 64000, the first with
a perplexity in the tens of thousands), and HuggingFaceTB/SmolLM2-135M at 0 and 5 shots. Each
page is measured first as tests/report/test_layout.py does (never wider than the window, no two
texts of a chart overlapping; the script stops otherwise), then shot 1280 px wide and cut below
its last painted row, or at the height given.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from PIL import Image, ImageChops

from jaxeval.report import load_runs, write_report
from tests.helpers.browser import screenshot
from tests.report.layout import measure
from tests.report.synthetic import write_n_shot_pair, write_sweep

WIDTH = 1280
PAGES = {  # name: (write the runs, height of the shot, report options)
    "report_sweep.png": (write_sweep, 2700, {"max_flips": 1}),
    "report_n_shot.png": (write_n_shot_pair, 2300, {"max_flips": 2}),
}


def crop_blank_bottom(png: Path, height: int, margin: int = 24) -> None:
    """Cuts the white below the last painted row (and below `height`); 256 colours keep the file
    small."""
    image = Image.open(png).convert("RGB")
    box = ImageChops.difference(image, Image.new("RGB", image.size, "white")).getbbox()
    bottom = min(image.height, height, box[3] + margin if box else image.height)
    image.crop((0, 0, image.width, bottom)).quantize(colors=256).save(png, optimize=True)


def shoot(name: str, out: Path, scratch: Path) -> Path:
    write, height, options = PAGES[name]
    write(scratch / "runs")
    runs = load_runs([str(scratch / "runs")])
    page = write_report(runs, scratch / "report.html", **options)
    layout = measure(page, scratch, width=WIDTH)
    if layout["body_width"] > WIDTH or layout["overlaps"]:
        raise SystemExit(f"{name}: {layout['body_width']} px wide, overlaps {layout['overlaps']}")
    png = screenshot(page, out / name, scratch, width=WIDTH, height=height + 400)
    crop_blank_bottom(png, height)
    return png


def main(argv: list[str] | None = None) -> list[Path]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="docs", help="the folder the images go to")
    args = p.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    done = []
    for name in PAGES:
        with tempfile.TemporaryDirectory(prefix="report_png_") as scratch:
            done.append(shoot(name, Path(args.out), Path(scratch)))
    return done


if __name__ == "__main__":
    for path in main():
        print(path)
