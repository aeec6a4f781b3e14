"""The geometry of the Metrics charts, drawn as SVG by templates/charts.html: bars, and axes with
readable labels (issue 20: the bars had no scale, and the histogram's 26 labels ran into one
another). Computed here, so the template only places what it is given and the numbers can be
tested; no JavaScript, nothing from a CDN.

The SVG keeps its aspect ratio (text is not stretched); CSS scales it to the page's width.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .filters import utc_text

#: The drawing's size in SVG units, and the margins the axes' labels take.
WIDTH, HEIGHT = 800, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 34
#: The histogram's bucket labels are turned to fit under narrow bars.
HIST_BOTTOM = 56
#: Seconds between two time labels: the first that gives at most about 7 labels.
LABEL_STEPS = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    cls: str
    title: str
    data: dict = field(default_factory=dict)


@dataclass
class Tick:
    at: float     # the position along its axis, in SVG units
    label: str


@dataclass
class Chart:
    label: str                      # what the chart shows (aria-label)
    y_title: str
    x_title: str
    height: int = HEIGHT
    bottom: int = BOTTOM
    bars: list[Bar] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    turn_x_labels: bool = False
    width: int = WIDTH
    left: int = LEFT
    top: int = TOP

    @property
    def plot_width(self) -> float:
        return self.width - self.left - RIGHT

    @property
    def plot_height(self) -> float:
        return self.height - self.top - self.bottom

    @property
    def base(self) -> float:
        """The y of the x axis."""
        return self.top + self.plot_height


def nice_ticks(peak: float, most: int = 5) -> list[float]:
    """0 and evenly spaced round values (1, 2 or 5 times a power of ten) up to at least
    ``peak``, at most ``most`` + 1 of them; whole numbers for counts of 5 and more."""
    if peak <= 0:
        return [0.0, 1.0]
    raw = peak / most
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    if peak >= 5:
        step = max(step, 1.0)
    count = math.ceil(peak / step - 1e-9)
    return [i * step for i in range(count + 1)]


def _label(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:g}"


def _y_axis(chart: Chart, peak: float) -> float:
    """Sets the y ticks; the value at the top of the plot."""
    ticks = nice_ticks(peak)
    top_value = ticks[-1]
    chart.y_ticks = [Tick(chart.base - chart.plot_height * v / top_value, _label(v))
                     for v in ticks]
    return top_value


def time_bars(series: list, step: int) -> Chart:
    """A class's processed (and, over them, failed) per interval: ``series`` is
    [(epoch, ClassMetrics)] oldest first, ``step`` seconds per interval."""
    per = "minute" if step == 60 else f"{step // 60} minutes"
    chart = Chart(f"jobs processed per {per}, failed in red", f"jobs per {per}", "UTC")
    top_value = _y_axis(chart, max([m.processed for _, m in series] + [0]))
    slot = chart.plot_width / max(len(series), 1)
    for i, (t, m) in enumerate(series):
        x = chart.left + i * slot
        title = f"{utc_text(t)}: {m.processed:,} processed, {m.failed:,} failed"
        for cls, n in (("processed", m.processed), ("failed", m.failed)):
            if n:
                h = chart.plot_height * n / top_value
                chart.bars.append(Bar(x, chart.base - h, slot * 0.85, h, cls, title,
                                      {"t": int(t), "n": n}))
    # about 6 time labels, at round times (14:00, 14:10, ...)
    every = next((s for s in LABEL_STEPS if s >= len(series) * step / 7), LABEL_STEPS[-1])
    chart.x_ticks = [Tick(chart.left + (i + 0.5) * slot, _hhmm(t))
                     for i, (t, _m) in enumerate(series) if int(t) % every == 0]
    return chart


def histogram(labels: list[str], counts: list[int]) -> Chart:
    """Runs per execution-time bucket (Sidekiq's 26: shorter than 20 ms .. slower than
    335 s)."""
    chart = Chart("runs per execution-time bucket", "runs", "execution time (shorter than)",
                  height=HEIGHT + HIST_BOTTOM - BOTTOM, bottom=HIST_BOTTOM, turn_x_labels=True)
    top_value = _y_axis(chart, max(counts + [0]))
    slot = chart.plot_width / max(len(labels), 1)
    for i, (label, n) in enumerate(zip(labels, counts)):
        x = chart.left + i * slot
        if n:
            h = chart.plot_height * n / top_value
            chart.bars.append(Bar(x + slot * 0.1, chart.base - h, slot * 0.8, h, "processed",
                                  f"shorter than {label}: {n:,} runs"
                                  if label != "Slow" else f"slower: {n:,} runs",
                                  {"bucket": label, "count": n}))
        chart.x_ticks.append(Tick(x + slot / 2, label))
    return chart


def _hhmm(t: float) -> str:
    return utc_text(t)[11:16]
