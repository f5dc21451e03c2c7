"""A dependency cycle of transactions drawn as a small inline SVG: what a G0 or G1c example looks like.

A cycle example (:mod:`checker.txn.cycles`) is a list of *steps*, each an edge ``from`` one
transaction ``to`` the next with its ``kind`` and evidence: ww (``partition``, ``offset``,
``next_offset``), wr (``partition``, ``offset``), process (``process``), realtime (``completed``,
``invoked``).  Read as a list, a cycle of three transactions is six numbers to keep in mind; drawn,
it is a loop one follows with the eye.  :func:`cycle_svg` places the transactions on a circle in
cycle order (the first edge on top) and draws each step as an arrow bent outwards, labelled with
its kind and, for ww and wr, the partition and offset(s); the full evidence is the arrow's
``<title>`` (a tooltip) and the steps table's text (:func:`edge_evidence`).

The drawing is computed here, in plain geometry, for three reasons: the page allows no script or
external asset (``harness.report.html_page``), the project takes no graph-layout dependency for
a loop of a few nodes, and the placement rules are what make it legible.  They are:

* the circle's radius grows with the number of nodes so that neighbouring nodes stay at least
  :data:`NODE_SPACING` apart (a 2-node cycle is drawn left and right, a 4-node one as a square);
* each arrow is a quadratic curve bent away from the circle's centre -- for two nodes the two
  arrows bend to opposite sides (each to the left of its direction) instead of lying on one line;
* each label sits on a white box just outside its arrow's midpoint, pushed out along the bend by
  half the box's extent in that direction, so it touches neither its arrow nor the circle's inside;
* the SVG's view box is the bounding box of every node and label, so nothing is clipped.

Text widths are estimated from a monospace font (:data:`CHAR_WIDTH`); the labels are short (at
most ``offsets 123456 → 123457``), so the estimate, not a renderer, decides the layout.  Node and
edge groups carry ``data-`` attributes (``data-txn``, ``data-kind``, ``data-from``, ``data-to``)
so tests and readers of the HTML can find them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from harness.report.html_page import esc

CHAR_WIDTH: Final = 7.3
"""Estimated width of one character of the 12 px monospace font (px)."""
LINE_HEIGHT: Final = 15.0
NODE_SPACING: Final = 220.0
"""The least distance between neighbouring nodes' centres on the circle (px)."""
MIN_RADIUS: Final = 85.0
MARGIN: Final = 10.0
KIND_COLOURS: Final[dict[str, str]] = {
    "ww": "#0969da",
    "wr": "#1a7f37",
    "process": "#8250df",
    "realtime": "#9a6700",
}
DASHED: Final = frozenset({"process", "realtime"})
"""Orders of execution, not of data, drawn dashed."""

Point = tuple[float, float]
Box = tuple[float, float, float, float]
"""(left, top, width, height)."""


def _number(value: Any) -> str:
    """An offset, process or index as text; ``?`` when unknown (null or not a number)."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "?"


def edge_label(step: Mapping[str, Any]) -> list[str]:
    """The lines of an arrow's label: the kind, then for ww and wr the partition and offset(s)."""
    kind = str(step.get("kind"))
    partition = f"partition {_number(step.get('partition'))}"
    if kind == "ww":
        return [
            kind,
            partition,
            f"offsets {_number(step.get('offset'))} → {_number(step.get('next_offset'))}",
        ]
    if kind == "wr":
        return [kind, partition, f"offset {_number(step.get('offset'))}"]
    if kind == "process":
        return [kind, f"process {_number(step.get('process'))}"]
    return [kind]


def edge_evidence(step: Mapping[str, Any]) -> str:
    """What a step says, as a sentence (the steps table's text and the arrow's tooltip)."""
    kind, source, target = str(step.get("kind")), _number(step.get("from")), _number(step.get("to"))
    partition, offset = _number(step.get("partition")), _number(step.get("offset"))
    if kind == "ww":
        return (
            f"partition {partition}: #{source} wrote value {_number(step.get('value'))} at offset {offset}, "
            f"the next known position, offset {_number(step.get('next_offset'))}, holds #{target}'s value "
            f"{_number(step.get('next_value'))}"
        )
    if kind == "wr":
        return (
            f"#{target} read value {_number(step.get('value'))} at partition {partition} offset {offset},"
            f" which #{source} sent"
        )
    if kind == "process":
        return f"process {_number(step.get('process'))} ran #{source}, then #{target}"
    if kind == "realtime":
        return (
            f"#{_number(step.get('completed', step.get('from')))} completed before #{target} was invoked"
            f" (its invoke: op #{_number(step.get('invoked'))})"
        )
    return f"{kind} edge from #{source} to #{target}"


def _node_lines(txn: int, process: Any) -> list[str]:
    return [f"#{txn}", f"process {_number(process)}"] if process is not None else [f"#{txn}", "(not shown)"]


def _size(lines: Sequence[str]) -> tuple[float, float]:
    """Width and height of a box holding ``lines``."""
    return max(len(line) for line in lines) * CHAR_WIDTH + 12.0, len(lines) * LINE_HEIGHT + 6.0


def _positions(count: int, radius: float) -> list[Point]:
    """``count`` points on a circle around (0, 0), clockwise on screen, the first edge on top."""
    start = -math.pi / 2 - math.pi / count
    return [
        (
            radius * math.cos(start + 2 * math.pi * k / count),
            radius * math.sin(start + 2 * math.pi * k / count),
        )
        for k in range(count)
    ]


def _boundary(centre: Point, size: tuple[float, float], towards: Point) -> Point:
    """Where the ray from ``centre`` towards ``towards`` leaves a box of ``size`` centred there."""
    dx, dy = towards[0] - centre[0], towards[1] - centre[1]
    half_w, half_h = size[0] / 2 + 2, size[1] / 2 + 2
    scale = min(half_w / abs(dx) if dx else math.inf, half_h / abs(dy) if dy else math.inf)
    return (centre[0] + dx * scale, centre[1] + dy * scale) if math.isfinite(scale) else centre


def _text(lines: Sequence[str], centre: Point, height: float, bold_first: bool) -> str:
    top = centre[1] - height / 2
    spans = []
    for number, line in enumerate(lines):
        weight = ' font-weight="bold"' if bold_first and number == 0 else ""
        y = top + 3 + LINE_HEIGHT * (number + 1) - 3.5
        spans.append(f'<text x="{centre[0]:.1f}" y="{y:.1f}"{weight}>{esc(line)}</text>')
    return "".join(spans)


def _box(centre: Point, size: tuple[float, float]) -> Box:
    return (centre[0] - size[0] / 2, centre[1] - size[1] / 2, size[0], size[1])


def _rect(box: Box, attributes: str) -> str:
    return (
        f'<rect x="{box[0]:.1f}" y="{box[1]:.1f}" width="{box[2]:.1f}" height="{box[3]:.1f}" {attributes}/>'
    )


def _edge(
    step: Mapping[str, Any], ends: tuple[Point, Point], sizes: tuple[Any, Any]
) -> tuple[str, list[Box]]:
    """One step's arrow and label, and the boxes it occupies (its label's)."""
    (ax, ay), (bx, by) = ends
    length = math.hypot(bx - ax, by - ay)
    ux, uy = (bx - ax) / length, (by - ay) / length
    nx, ny = -uy, ux  # to the left of the direction on screen
    mid = ((ax + bx) / 2, (ay + by) / 2)
    if mid[0] * nx + mid[1] * ny < 0 and math.hypot(*mid) > 1e-6:
        nx, ny = -nx, -ny  # bend away from the centre
    bend = max(0.18 * length, 26.0)
    control = (mid[0] + 2 * bend * nx, mid[1] + 2 * bend * ny)
    start, end = _boundary(ends[0], sizes[0], control), _boundary(ends[1], sizes[1], control)
    tx, ty = end[0] - control[0], end[1] - control[1]
    norm = math.hypot(tx, ty) or 1.0
    tx, ty = tx / norm, ty / norm
    head = [
        end,
        (end[0] - 10 * tx - 4.5 * ty, end[1] - 10 * ty + 4.5 * tx),
        (end[0] - 10 * tx + 4.5 * ty, end[1] - 10 * ty - 4.5 * tx),
    ]
    kind = str(step.get("kind"))
    colour = KIND_COLOURS.get(kind, "#57606a")
    dash = ' stroke-dasharray="6 4"' if kind in DASHED else ""
    lines = edge_label(step)
    width, height = _size(lines)
    push = abs(nx) * width / 2 + abs(ny) * height / 2 + 4
    label = (mid[0] + (bend + push) * nx, mid[1] + (bend + push) * ny)
    box = _box(label, (width, height))
    svg = (
        f'<g class="edge" data-kind="{esc(kind)}" data-from="{esc(step.get("from"))}" data-to="{esc(step.get("to"))}">'
        f"<title>{esc(edge_evidence(step))}</title>"
        f'<path d="M{start[0]:.1f},{start[1]:.1f} Q{control[0]:.1f},{control[1]:.1f} {end[0] - 8 * tx:.1f},'
        f'{end[1] - 8 * ty:.1f}" fill="none" stroke="{colour}" stroke-width="1.8"{dash}/>'
        f'<polygon points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in head)}" fill="{colour}"/>'
        + _rect(box, f'class="label" rx="3" fill="#ffffff" stroke="{colour}" stroke-width="0.8"')
        + f'<g fill="{colour}">{_text(lines, label, height, True)}</g></g>'
    )
    return svg, [box]


def cycle_svg(steps: Sequence[Mapping[str, Any]], processes: Mapping[int, Any]) -> str:
    """The cycle of ``steps`` (in order; each ``from`` a transaction index) as an ``<svg>`` element.

    ``processes``: transaction index -> its process, for the nodes' second line; a transaction
    the example does not show (the target of a cut-off cycle's last step) is drawn dashed, "(not
    shown)".  Steps whose ``from`` or ``to`` is no integer are left out of the drawing (the steps
    table still lists them); no drawable step gives an empty string.
    """
    drawn = [s for s in steps if isinstance(s.get("from"), int) and isinstance(s.get("to"), int)]
    nodes: list[int] = []
    for step in drawn:
        for end in (step["from"], step["to"]):
            if end not in nodes:
                nodes.append(end)
    if not drawn:
        return ""
    labels = {txn: _node_lines(txn, processes.get(txn)) for txn in nodes}
    sizes = {txn: _size(lines) for txn, lines in labels.items()}
    widest = max(size[0] for size in sizes.values())
    spacing = max(NODE_SPACING, widest + 90)
    radius = max(MIN_RADIUS, spacing / (2 * math.sin(math.pi / len(nodes)))) if len(nodes) > 1 else 0.0
    at = dict(zip(nodes, _positions(len(nodes), radius), strict=True))
    parts: list[str] = []
    boxes: list[Box] = []
    for step in drawn:
        source, target = step["from"], step["to"]
        if source != target:
            svg, occupied = _edge(step, (at[source], at[target]), (sizes[source], sizes[target]))
            parts.append(svg)
            boxes += occupied
    for txn in nodes:
        box = _box(at[txn], sizes[txn])
        boxes.append(box)
        shown = txn in processes
        stroke = "#57606a" if shown else "#8c959f"
        dash = "" if shown else ' stroke-dasharray="4 3"'
        parts.append(
            f'<g class="node" data-txn="{txn}">'
            + _rect(box, f'rx="10" fill="#f6f8fa" stroke="{stroke}" stroke-width="1.5"{dash}')
            + f'<g fill="#1f2328">{_text(labels[txn], at[txn], box[3], True)}</g></g>'
        )
    left = min(b[0] for b in boxes) - MARGIN
    top = min(b[1] for b in boxes) - MARGIN
    width = max(b[0] + b[2] for b in boxes) + MARGIN - left
    height = max(b[1] + b[3] for b in boxes) + MARGIN - top
    return (
        f'<svg class="cycle" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}"'
        f' viewBox="{left:.1f} {top:.1f} {width:.1f} {height:.1f}" role="img"'
        f' aria-label="{esc(f"a cycle of {len(nodes)} transactions")}"'
        ' style="max-width:100%;height:auto" font-family="ui-monospace,SFMono-Regular,Menlo,monospace"'
        f' font-size="12" text-anchor="middle">{"".join(parts)}</svg>'
    )
