"""docs/report.png: a report of two runs, taken in headless Chromium (tests/helpers/browser.py).

    python -m tests.report.make_screenshot RUN_A RUN_B docs/report.png --label A --label B

The runs in docs/report.png are two checkpoints of `examples/train_and_evaluate.py --results_dir
runs/ --limit 40` (steps 40 and 240), passed as relative paths. The page is shot at 1280 px wide
and cropped below its last painted row.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from PIL import Image, ImageChops

from jaxeval.report import load_runs, write_report
from tests.helpers.browser import screenshot


def crop_blank_bottom(png: Path, margin: int = 24) -> None:
    """Cuts the white below the page's last painted row; 256 colours keep the file small."""
    image = Image.open(png).convert("RGB")
    box = ImageChops.difference(image, Image.new("RGB", image.size, "white")).getbbox()
    if box:
        image = image.crop((0, 0, image.width, min(image.height, box[3] + margin)))
    image.quantize(colors=256).save(png, optimize=True)


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs=2)
    p.add_argument("png")
    p.add_argument("--label", action="append", default=None)
    p.add_argument("--max_flips", type=int, default=2)
    p.add_argument("--height", type=int, default=4000)
    args = p.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="report_png_"))
    runs = load_runs(args.runs, args.label)
    html = write_report(runs, scratch / "report.html", max_flips=args.max_flips)
    png = screenshot(html, Path(args.png), scratch, width=1280, height=args.height)
    crop_blank_bottom(png)
    return png


if __name__ == "__main__":
    print(main())
