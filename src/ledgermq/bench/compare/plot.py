"""The compare bench's document as an SVG bar chart, for docs/benchmarks.md.

Plain SVG written as text (no plotting dependency), pure: a document in, a string out, so
a plot can be rebuilt from a saved ``--json`` file at any time. One horizontal bar per
comparison row (its rate ratio on a common axis), a reference line at 1.0x, the row's goal
from :mod:`goals` as a tick, bars coloured by whether the goal is met, and a small panel
with the server CPU per message of both sides. Only attributes and a common font family
are used, because GitHub shows the file as an image (no scripts, no web fonts).
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from ledgermq.bench.compare.goals import RowKey, goal_for

WIDTH = 900
FONT = "Helvetica, Arial, sans-serif"
MET = "#2da44e"
MISSED = "#cf222e"
NO_GOAL = "#8c959f"
INK = "#1f2328"
MUTED = "#59636e"
GRID = "#d8dee4"
STRIPE = "#f6f8fa"

LABEL_X = 16
LABEL_CHARS = 46  # about 300 px of 12 px text
SIDES_CHARS = 58
BAR_X0 = 330
BAR_X1 = 680  # the axis maximum; the ratio text goes to the right of a bar's end
CPU_MEASURED_X = 812  # right edges of the CPU panel's two columns
CPU_BASE_X = 884
TOP = 112
ROW_H = 50
BAR_H = 18
RATIO_TEXT_W = 42  # "10.00x" in 12 px bold, about
FOOTER_CHARS = 130

_SIDE = re.compile(r"^(.+) \(([^()]+)\)$")  # "ledgermq SYNC_MASTER (inflight)"
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@dataclass(frozen=True, slots=True)
class PlotRow:
    """One comparison row as the plot needs it; ``ratio`` None means it did not run."""

    label: str
    sides: str
    ratio: float | None
    goal: float | None
    cpu: float | None
    base_cpu: float | None
    rate: float | None
    base_rate: float | None

    @property
    def status(self) -> str:
        """``met``, ``missed``, ``no-goal`` or ``not-run``: the bar's class and colour."""
        if self.ratio is None:
            return "not-run"
        if self.goal is None:
            return "no-goal"
        return "met" if self.ratio >= self.goal else "missed"


def default_title(doc: dict[str, Any]) -> str:
    """The title when the caller gives none; the settings go in the subtitle."""
    return "ledgermq against NATS JetStream (ledgermq bench compare)"


def plot_rows(doc: dict[str, Any]) -> list[PlotRow]:
    """The document's rows, checked: a document that is not a compare document is refused
    with the reason; a row without a ratio is kept as not run."""
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ValueError("not a `ledgermq bench compare` document: no list of rows")
    rows = []
    for i, row in enumerate(doc["rows"]):
        where = f"row {i + 1}"
        if not isinstance(row, dict) or not isinstance(row.get("workload"), str):
            raise ValueError(f"{where}: expected an object with a workload label")
        measured, base = row.get("measured"), row.get("base")
        system, baseline = _text(row.get("system")), _text(row.get("baseline"))
        rows.append(
            PlotRow(
                label=row["workload"],
                sides=f"{system or '?'} ÷ {baseline or '?'}",
                ratio=_number(row.get("rate_ratio"), f"{where}: rate_ratio"),
                goal=goal_for(_key(row.get("ids"), system, baseline)),
                cpu=_figure(measured, "server_cpu_us_per_msg", where),
                base_cpu=_figure(base, "server_cpu_us_per_msg", where),
                rate=_figure(measured, "per_s", where),
                base_rate=_figure(base, "per_s", where),
            )
        )
    return rows


def render_svg(doc: dict[str, Any], *, title: str) -> str:
    """The whole chart as one self-contained SVG document (UTF-8 text, no XML declaration)."""
    rows = plot_rows(doc)
    axis_max, step = _axis(rows)
    bottom = TOP + ROW_H * max(len(rows), 1)
    footer = _footer_lines(doc)
    height = bottom + 72 + 16 * len(footer)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family={quoteattr(FONT)} font-size="12" fill="{INK}">',
        f"<title>{_esc(title)}</title>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        _text_el(LABEL_X, 30, title, size=17, weight="bold"),
        _text_el(LABEL_X, 50, _subtitle(doc), size=12, fill=MUTED),
        *_legend(LABEL_X, 72),
        _text_el((CPU_MEASURED_X + CPU_BASE_X) // 2 - 30, TOP - 24, "server CPU µs/msg", size=11, anchor="middle"),
        _text_el(CPU_MEASURED_X, TOP - 8, "measured", size=10, fill=MUTED, anchor="end"),
        _text_el(CPU_BASE_X, TOP - 8, "baseline", size=10, fill=MUTED, anchor="end"),
    ]
    shapes: list[str] = []
    texts: list[str] = []
    for i, row in enumerate(rows):
        _row(i, row, axis_max, shapes, texts)
    if not rows:
        texts.append(_text_el(BAR_X0 + 6, TOP + 30, "no comparison ran", size=12, fill=MUTED, italic=True))
    # stripes, then the grid, bars and goal ticks, the 1.0x line, and all text on top
    out += [f'<rect x="0" y="{TOP + i * ROW_H}" width="{WIDTH}" height="{ROW_H}" fill="{STRIPE}"/>'
            for i in range(0, len(rows), 2)]  # fmt: skip
    out += _grid(axis_max, step, bottom)
    out += shapes
    one = _x(1.0, axis_max)
    out.append(
        f'<line class="ref-line" x1="{one:.1f}" y1="{TOP - 14}" x2="{one:.1f}" y2="{bottom + 4}" '
        f'stroke="{INK}" stroke-width="1.5" stroke-dasharray="5 3"><title>1.0x: as fast as the baseline</title></line>'
    )
    out.append(_text_el(one, TOP - 18, "1.0x", size=11, weight="bold", anchor="middle"))
    out += texts
    for j, line in enumerate(footer):
        out.append(_text_el(LABEL_X, bottom + 64 + 16 * j, line, size=11, fill=MUTED))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _row(i: int, row: PlotRow, axis_max: float, shapes: list[str], texts: list[str]) -> None:
    """Row ``i``'s bar and goal tick into ``shapes``, its text into ``texts`` (drawn last,
    so no line crosses a glyph)."""
    y = TOP + i * ROW_H
    mid = y + ROW_H / 2
    label = textwrap.wrap(row.label, LABEL_CHARS) or [""]
    if len(label) > 2:
        label = [label[0], _shorten(" ".join(label[1:]), LABEL_CHARS)]
    first = y + (14 if len(label) == 2 else 20)
    for j, line in enumerate(label):
        texts.append(_text_el(LABEL_X, first + 14 * j, line, size=12, cls="label"))
    texts.append(_text_el(LABEL_X, first + 14 * len(label), _shorten(row.sides, SIDES_CHARS), size=10, fill=MUTED))
    goal_x = None if row.goal is None else _x(row.goal, axis_max)
    if row.ratio is None:
        texts.append(_text_el(BAR_X0 + 6, mid + 4, "not run", size=12, fill=MUTED, italic=True, cls="not-run"))
    else:
        colour = {"met": MET, "missed": MISSED}.get(row.status, NO_GOAL)
        end = _x(row.ratio, axis_max)
        text_x = end + 5
        if goal_x is not None and end - 2 < goal_x < end + RATIO_TEXT_W:
            text_x = goal_x + 5  # past the goal tick rather than through it
        shapes.append(
            f'<rect class="bar {row.status}" data-row="{i}" x="{BAR_X0}" y="{mid - BAR_H / 2:.1f}" '
            f'width="{end - BAR_X0:.1f}" height="{BAR_H}" fill="{colour}"><title>{_esc(_tooltip(row))}</title></rect>'
        )
        texts.append(_text_el(text_x, mid + 4, f"{row.ratio:.2f}x", size=12, weight="bold", cls="ratio", halo=True))
    if goal_x is not None and row.goal is not None:
        shapes.append(
            f'<line class="goal" data-row="{i}" x1="{goal_x:.1f}" y1="{mid - BAR_H / 2 - 6:.1f}" x2="{goal_x:.1f}" '
            f'y2="{mid + BAR_H / 2 + 6:.1f}" stroke="{INK}" stroke-width="2.5"/>'
        )
        goal_text = f"goal ≥ {row.goal:.1f}x"
        texts.append(_text_el(goal_x + 4, mid - BAR_H / 2 - 2, goal_text, size=10, cls="goal-label", halo=True))
    texts.append(_text_el(CPU_MEASURED_X, mid + 4, _cpu(row.cpu), size=12, anchor="end", cls="cpu"))
    texts.append(_text_el(CPU_BASE_X, mid + 4, _cpu(row.base_cpu), size=12, fill=MUTED, anchor="end", cls="cpu"))


def _grid(axis_max: float, step: float, bottom: int) -> Iterator[str]:
    """Vertical grid lines with their tick labels, the axis line and its title."""
    ticks = round(axis_max / step)
    for k in range(ticks + 1):
        value = k * step
        x = _x(value, axis_max)
        yield f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{bottom}" stroke="{GRID}" stroke-width="1"/>'
        yield _text_el(x, bottom + 18, f"{value:g}x", size=11, fill=MUTED, anchor="middle")
    yield f'<line x1="{BAR_X0}" y1="{bottom}" x2="{BAR_X1}" y2="{bottom}" stroke="{MUTED}" stroke-width="1"/>'
    yield _text_el(
        (BAR_X0 + BAR_X1) / 2, bottom + 36, "rate ratio: measured / baseline msgs/s (higher is better)",
        size=11, anchor="middle",
    )  # fmt: skip


def _legend(x: int, y: int) -> Iterator[str]:
    for colour, text in ((MET, "goal met"), (MISSED, "goal missed"), (NO_GOAL, "no goal")):
        yield f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{colour}"/>'
        yield _text_el(x + 17, y, text, size=11)
        x += 30 + 7 * len(text)
    yield f'<line x1="{x + 5}" y1="{y - 12}" x2="{x + 5}" y2="{y + 3}" stroke="{INK}" stroke-width="2.5"/>'
    yield _text_el(x + 13, y, "goal (issue #12)", size=11)


def _axis(rows: list[PlotRow]) -> tuple[float, float]:
    """A round axis maximum that holds every ratio, goal and 1.0x, and its tick step."""
    top = max([1.0] + [v for r in rows for v in (r.ratio, r.goal) if v is not None])
    wanted = top * 1.05
    step = next(s for s in _steps() if wanted / s <= 8)
    return math.ceil(wanted / step) * step, step


def _steps() -> Iterator[float]:
    scale = 0.1
    while True:
        for m in (2.5, 5.0, 10.0):
            yield m * scale
        scale *= 10


def _x(value: float, axis_max: float) -> float:
    return BAR_X0 + (BAR_X1 - BAR_X0) * min(value, axis_max) / axis_max


def _subtitle(doc: dict[str, Any]) -> str:
    text = "each bar: the row's msgs/s divided by its baseline's, measured in the same run"
    s = doc.get("settings")
    if isinstance(s, dict) and isinstance(s.get("size"), int) and isinstance(s.get("messages"), int):
        text += f"; {s['size']} B messages, {s['messages']:,} per workload and round"
    return text


def _footer_lines(doc: dict[str, Any]) -> list[str]:
    command = f"command: {_text(doc.get('command')) or 'not recorded'}"
    lines = textwrap.wrap(command, FOOTER_CHARS, break_on_hyphens=False)  # paths and options stay whole
    date = _text(doc.get("date"))
    if date:
        lines.append(f"date: {date}")
    loads = [
        r["load_1m"] for r in doc.get("rounds") or [] if isinstance(r, dict) and _is_number(r.get("load_1m"))
    ]  # fmt: skip
    if loads:
        lines.append(
            f"rounds: {len(loads)} in ABBA order, 1-minute load {min(loads):.2f} to {max(loads):.2f} at their start"
        )
    else:
        lines.append("rounds: none recorded")
    return lines


def _tooltip(row: PlotRow) -> str:
    rates = ""
    if row.rate is not None and row.base_rate is not None:
        rates = f": {row.rate:,.0f} / {row.base_rate:,.0f} msgs/s"
    goal = "no goal" if row.goal is None else f"goal ≥ {row.goal:.1f}x, {row.status}"
    return f"{row.label} ({row.sides}){rates} = {row.ratio:.3f}x; {goal}"


def _cpu(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def _key(ids: object, system: str, baseline: str) -> RowKey | None:
    """The row's sides: its ``ids`` when the document has them, else parsed from the
    ``system (workload)`` texts that documents written before the ids carry."""
    if isinstance(ids, dict):
        parts = [ids.get(k) for k in ("system", "workload", "base_system", "base_workload")]
        if all(isinstance(p, str) for p in parts):
            return RowKey(*(str(p) for p in parts))
    a, b = _SIDE.match(system), _SIDE.match(baseline)
    if a is None or b is None:
        return None
    return RowKey(a[1], a[2], b[1], b[2])


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _number(v: object, what: str) -> float | None:
    """None (missing: not run) or a finite number >= 0; anything else is refused."""
    if v is None:
        return None
    if not _is_number(v) or float(v) < 0:  # type: ignore[arg-type]
        raise ValueError(f"{what}: expected a finite number >= 0 or null, got {v!r}")
    return float(v)  # type: ignore[arg-type]


def _figure(side: object, name: str, where: str) -> float | None:
    if not isinstance(side, dict):
        return None
    return _number(side.get(name), f"{where}: {name}")


def _text(v: object) -> str:
    return v if isinstance(v, str) else ""


def _shorten(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1].rstrip() + "…"


def _esc(text: str) -> str:
    """Text as XML character data: markup escaped, characters XML 1.0 forbids dropped."""
    return escape(_NOT_XML.sub("", text))


def _text_el(
    x: float,
    y: float,
    text: str,
    *,
    size: int,
    fill: str = INK,
    weight: str | None = None,
    anchor: str | None = None,
    italic: bool = False,
    cls: str | None = None,
    halo: bool = False,
) -> str:
    """One ``<text>``; ``halo`` outlines it in white so a grid or reference line behind
    it does not cross the glyphs."""
    attrs = f'x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}"'
    if weight:
        attrs += f' font-weight="{weight}"'
    if anchor:
        attrs += f' text-anchor="{anchor}"'
    if italic:
        attrs += ' font-style="italic"'
    if cls:
        attrs += f' class="{cls}"'
    if halo:
        attrs += ' stroke="#ffffff" stroke-width="3" stroke-linejoin="round" paint-order="stroke"'
    return f"<text {attrs}>{_esc(text)}</text>"
