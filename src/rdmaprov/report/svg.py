"""Plots as plain SVG text: a line chart and a horizontal bar chart, each with labelled axes and
ticks and labelled reference lines (a gate's threshold).

Written here rather than drawn with a plotting library, for three reasons. The report is read on
air-gapped sites, so a plot must be text inside the page, never a script or a font to fetch. The
control machine that runs rdmaprov has pyinfra and a few pure-Python packages, no numpy or
matplotlib wheel (nor the compiler or mirror to get one). And the same figures give the same
bytes: every coordinate is rounded to a tenth of a pixel and nothing else (no ids, dates or font
metrics) goes in, so a page made later from a run's saved JSON equals the live run's, byte for
byte.

Every text (labels, titles, tick labels) is escaped with html.escape: node names and reasons
come from inventories and remote hosts. Colours of bars come from CSS classes the page defines
(a bar's class is its verdict); lines and axes carry their own strokes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

CHAR_PX = 6.6  # the width of one character of the 11 px labels, to size the room for labels
LABEL_CHARS = 40  # a bar's label longer than this is cut (the whole label is in its tooltip)
BAR_PX = 12  # the height of one bar's row


def _n(value: float) -> str:
    """A coordinate, rounded so that the same figures always give the same text."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _text(x: float, y: float, text: str, anchor: str = "middle", css: str = "") -> str:
    attribute = f' class="{escape(css)}"' if css else ""
    return f'<text x="{_n(x)}" y="{_n(y)}" text-anchor="{anchor}"{attribute}>{escape(text)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, css: str, stroke: str, dash: str = "") -> str:
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<line class="{escape(css)}" x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" '
        f'stroke="{stroke}"{dashed}/>'
    )


def nice_ticks(high: float) -> list[float]:
    """0 up to the first round figure at or above `high`, in 1, 2 or 5 × 10ⁿ steps (at most 6)."""
    if high <= 0:
        return [0.0, 1.0]
    step = 10 ** math.floor(math.log10(high / 5))
    for factor in (1, 2, 5, 10):
        if high / (factor * step) <= 5:
            step *= factor
            break
    count = math.ceil(high / step - 1e-9)
    return [round(i * step, 12) for i in range(count + 1)]


def _log2(value: float) -> float:
    return math.log2(max(value, 1e-12))


@dataclass(frozen=True)
class Scale:
    """Data to pixels along one axis: `low`..`high` onto `start`..`end`, linear or in log₂."""

    low: float
    high: float
    start: float
    end: float
    log2: bool = False

    def at(self, value: float) -> float:
        if self.log2:
            value, low, high = _log2(value), _log2(self.low), _log2(self.high)
        else:
            low, high = self.low, self.high
        share = (value - low) / (high - low) if high != low else 0.0
        return self.start + share * (self.end - self.start)


def _plain(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class Axis:
    """An axis: its label, the data values at its two ends, its ticks, and how a tick is written."""

    label: str
    low: float
    high: float
    ticks: Sequence[float]
    log2: bool = False
    write: Callable[[float], str] = _plain

    @classmethod
    def linear(cls, label: str, high: float, write: Callable[[float], str] = _plain) -> Axis:
        """From 0 to the first round figure at or above `high`, a tick at each round step."""
        ticks = nice_ticks(high)
        return cls(label, 0.0, ticks[-1], ticks, False, write)

    @classmethod
    def powers_of_two(cls, label: str, low: float, high: float, write: Callable[[float], str] = _plain) -> Axis:
        """In log₂ from the power of two at or below `low` to the one at or above `high`, a tick at
        each power (every other one, or every fourth…, where there would be more than nine)."""
        first, last = math.floor(_log2(low)), math.ceil(_log2(high))
        last = max(last, first + 1)  # one size alone still has an axis around it
        stride = max(1, math.ceil((last - first + 1) / 9))
        ticks = [float(2**e) for e in range(first, last + 1, stride)]
        return cls(label, float(2**first), float(2**last), ticks, True, write)

    def scale(self, start: float, end: float) -> Scale:
        return Scale(self.low, self.high, start, end, self.log2)


@dataclass(frozen=True)
class Rule:
    """A reference line across the plot at `value` (a threshold), with its label."""

    value: float
    label: str
    stroke: str = "#b3261e"


@dataclass(frozen=True)
class Series:
    """One line of a line chart: (x, y) points, in x order."""

    name: str
    points: Sequence[tuple[float, float]]
    stroke: str = "#1f5fa8"


@dataclass(frozen=True)
class Bar:
    """One bar of a bar chart: its label, value, class (its colour on the page), tooltip, and
    where the bar has a reference of its own (`mark`), a tick across it there."""

    label: str
    value: float
    css: str
    note: str = ""
    mark: float | None = None


@dataclass(frozen=True)
class Frame:
    """The plot area inside the picture, and the picture's size."""

    width: float
    height: float
    left: float
    top: float
    right: float
    bottom: float


def _svg(frame: Frame, title: str, body: list[str]) -> str:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{_n(frame.width)}" '
        f'height="{_n(frame.height)}" viewBox="0 0 {_n(frame.width)} {_n(frame.height)}" '
        f'role="img" aria-label="{escape(title)}">'
    )
    return "\n".join([head, f"<title>{escape(title)}</title>", *body, "</svg>"])


def _x_axis(frame: Frame, axis: Axis, scale: Scale) -> list[str]:
    """The x axis at the bottom: its line, each tick with its label, and the axis' label."""
    parts = [_line(frame.left, frame.bottom, frame.right, frame.bottom, "axis", "#444")]
    for value in axis.ticks:
        x = scale.at(value)
        parts.append(
            f'<g class="x-tick">{_line(x, frame.top, x, frame.bottom + 4, "grid", "#ddd")}'
            f"{_text(x, frame.bottom + 16, axis.write(value))}</g>"
        )
    parts.append(_text((frame.left + frame.right) / 2, frame.bottom + 34, axis.label, css="axis-label"))
    return parts


def _y_axis(frame: Frame, axis: Axis, scale: Scale) -> list[str]:
    """The y axis at the left: its line, each tick with its label, and the axis' label upright."""
    parts = [_line(frame.left, frame.top, frame.left, frame.bottom, "axis", "#444")]
    for value in axis.ticks:
        y = scale.at(value)
        parts.append(
            f'<g class="y-tick">{_line(frame.left - 4, y, frame.right, y, "grid", "#ddd")}'
            f"{_text(frame.left - 7, y + 4, axis.write(value), anchor='end')}</g>"
        )
    middle = (frame.top + frame.bottom) / 2
    parts.append(
        f'<text class="axis-label" x="14" y="{_n(middle)}" text-anchor="middle" '
        f'transform="rotate(-90 14 {_n(middle)})">{escape(axis.label)}</text>'
    )
    return parts


def _horizontal_rule(frame: Frame, rule: Rule, scale: Scale) -> list[str]:
    y = scale.at(rule.value)
    return [
        _line(frame.left, y, frame.right, y, "threshold", rule.stroke, "6 3"),
        _text(frame.right - 4, y - 4, rule.label, anchor="end", css="threshold-label"),
    ]


def _vertical_rule(frame: Frame, rule: Rule, scale: Scale) -> list[str]:
    x = scale.at(rule.value)
    return [
        _line(x, frame.top - 6, x, frame.bottom, "threshold", rule.stroke, "6 3"),
        _text(x, frame.top - 9, rule.label, css="threshold-label"),
    ]


def line_chart(
    title: str,
    series: Sequence[Series],
    x: Axis,
    y: Axis,
    rules: Sequence[Rule] = (),
    size: tuple[int, int] = (720, 340),
) -> str:
    """Each series as a polyline with a dot at each point (its x and y in the dot's tooltip), over
    both axes, the rules drawn across, a legend of the series at the top."""
    width, height = size
    frame = Frame(width, height, 64, 34, width - 16, height - 48)
    xs, ys = x.scale(frame.left, frame.right), y.scale(frame.bottom, frame.top)
    body = _x_axis(frame, x, xs) + _y_axis(frame, y, ys)
    for number, line in enumerate(series):
        points = [(xs.at(a), ys.at(b)) for a, b in line.points]
        body.append(
            f'<polyline class="series" fill="none" stroke="{line.stroke}" stroke-width="2" '
            f'points="{" ".join(f"{_n(a)},{_n(b)}" for a, b in points)}"/>'
        )
        body += [
            f'<circle cx="{_n(a)}" cy="{_n(b)}" r="2.5" fill="{line.stroke}">'
            f"<title>{escape(f'{line.name}: {x.write(px)} → {py:g}')}</title></circle>"
            for (a, b), (px, py) in zip(points, line.points, strict=True)
        ]
        legend_x = frame.left + 8 + 180 * number
        body.append(_line(legend_x, 14, legend_x + 18, 14, "legend", line.stroke))
        body.append(_text(legend_x + 22, 18, line.name, anchor="start", css="legend"))
    for rule in rules:
        body += _horizontal_rule(frame, rule, ys)
    return _svg(frame, title, body)


def _bar_label(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def bar_chart(title: str, bars: Sequence[Bar], axis: Axis, rules: Sequence[Rule] = (), width: int = 720) -> str:
    """One horizontal bar per item, labelled at the left, its value at its end and its note as its
    tooltip; the value axis at the bottom and the rules drawn across."""
    longest = max((len(_bar_label(b.label)) for b in bars), default=4)
    left = min(12 + CHAR_PX * longest, width / 2)
    frame = Frame(width, 30 + BAR_PX * len(bars) + 44, left, 24, width - 48, 24 + BAR_PX * len(bars))
    scale = axis.scale(frame.left, frame.right)
    body = _x_axis(frame, axis, scale)
    for row, bar in enumerate(bars):
        top = frame.top + row * BAR_PX
        end = scale.at(bar.value)
        tooltip = f"<title>{escape(bar.note or bar.label)}</title>"
        body.append(
            f'<g class="bar"><rect class="{escape(bar.css)}" x="{_n(frame.left)}" y="{_n(top + 2)}" '
            f'width="{_n(max(end - frame.left, 0.5))}" height="{_n(BAR_PX - 4)}">{tooltip}</rect>'
            f"{_text(frame.left - 6, top + BAR_PX - 3, _bar_label(bar.label), anchor='end')}"
            f"{_text(end + 4, top + BAR_PX - 3, f'{bar.value:.4g}', anchor='start', css='value')}</g>"
        )
        if bar.mark is not None:
            x = scale.at(bar.mark)
            body.append(_line(x, top, x, top + BAR_PX, "mark", "#b3261e"))
    for rule in rules:
        body += _vertical_rule(frame, rule, scale)
    return _svg(frame, title, body)
