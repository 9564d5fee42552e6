"""``engine dashboard``: the page in headless Chromium (its DOM and a screenshot
checked pixel by pixel), read-only, on loopback."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import engine
from tests.monitor.monitor_helpers import make_stores, start_server, stop
from tests.monitor.tools import require

#: The page's series colours (engine/monitor/dashboard.py), as RGB.
COLORS = [(0x1F, 0x77, 0xB4), (0xD6, 0x27, 0x28), (0x2C, 0xA0, 0x2C), (0xFF, 0x7F, 0x0E), (0x94, 0x67, 0xBD)]
WIDTH, HEIGHT = 1200, 900


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return answer.read()


def _chromium(browser: str, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--window-size={WIDTH},{HEIGHT}", "--virtual-time-budget=4000", *args, url],
                          capture_output=True, text=True, timeout=120)


def test_dashboard_in_headless_chromium(tmp_path: Path) -> None:
    browser = require("chromium", "chromium-browser", "google-chrome", package="chromium")
    image_module = pytest.importorskip("PIL.Image", reason="Pillow comes with the spark extra (matplotlib)")
    data = tmp_path / "data"
    make_stores(data)
    before = sorted(str(p) for p in data.rglob("*"))
    proc, url = start_server(["dashboard", str(data), "--port", "0", "--interval", "0.2"], r"at (http://\S+/) ")
    try:
        assert url.startswith("http://127.0.0.1:")  # loopback unless told otherwise
        # The idle reader falls behind while the page watches: its backlog grows over the samples.
        with engine.Queue.open(data / "queues", "jobs") as q:
            for i in range(6):
                q.put_many([b"burst %d %d" % (i, k) for k in range(50)])
                time.sleep(0.3)
        time.sleep(0.5)
        history = json.loads(_get(url + "api/history"))
        series = list(history["backlog"])
        idle = history["backlog"]["queues/jobs: idle"]
        assert idle[0] == 30 and idle[-1] == 330 and len(idle) >= 5
        # Read-only: nothing but GET and HEAD.
        for method in ("POST", "PUT", "DELETE"):
            request = urllib.request.Request(url + "api/view", data=b"x", method=method)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=30)
            assert refused.value.code == 405

        dom = _chromium(browser, url, "--dump-dom")
        assert dom.returncode == 0, dom.stderr[-2000:]
        assert 'data-ready="1"' in dom.stdout
        assert "Most behind: queues/jobs: idle: 330 items" in dom.stdout and "growing" in dom.stdout

        shot = tmp_path / "dashboard.png"
        done = _chromium(browser, url, f"--screenshot={shot}")
        assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    finally:
        stop(proc)
    assert sorted(str(p) for p in data.rglob("*")) == before  # the dashboard wrote nothing

    image = image_module.open(shot).convert("RGB")
    assert image.size == (WIDTH, HEIGHT)
    pixels = image.load()

    def rows_of(color: tuple[int, int, int], x0: int, x1: int, y0: int, y1: int) -> list[tuple[int, int]]:
        return [(x, y) for x in range(x0, x1) for y in range(y0, y1) if pixels[x, y] == color]

    # The backlog chart (top, full width): the idle reader's line rises from left to right.
    idle_color = COLORS[series.index("queues/jobs: idle") % len(COLORS)]
    line = rows_of(idle_color, 90, 875, 110, 380)  # the plot area, left of the legend
    assert len(line) > 200, "the idle reader's line is not drawn"
    first, last = min(x for x, _ in line), max(x for x, _ in line)
    start = [y for x, y in line if x < first + 5]
    end = [y for x, y in line if x > last - 5]
    assert min(start) > max(end) + 100  # higher on screen at the end: the backlog grew (30 -> 330)
    # The disk chart (bottom left): one bar per store, in the series colours.
    bars = {color: len(rows_of(color, 200, 590, 440, 720)) for color in COLORS}
    assert sum(1 for n in bars.values() if n > 20) >= 5, bars
    # Text, not just colour: the page is not blank or an error page.
    assert len({pixels[x, y] for x in range(0, WIDTH, 7) for y in range(0, 400, 7)}) > 20
