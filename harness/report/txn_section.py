"""The run page's transactional anomalies: each example's transactions with their micro-ops, and
each cycle drawn.

The anomaly table (:mod:`harness.report.run_page`) shows every example as one row of JSON cells;
a transactional example holds whole transactions (:mod:`checker.txn.examples`), and a cycle a
list of edges between them, which read badly that way.  :func:`txn_section` shows, for every
transactional anomaly the run reported (:data:`TXN_KINDS`: the ``transaction`` family, G1a --
the value family's, whose example holds the aborted transaction's op and the read's -- and the
white-box hanging-transaction), each example as

* its facts (partition, offsets, values, times -- the example's fields that are not transactions)
  in a one-row table;
* for a cycle (G0, G1c and their ``-process`` / ``-realtime`` variants): the cycle drawn
  (:func:`harness.report.cycle_svg.cycle_svg`) beside its steps, one row per edge with what proves
  it (:func:`harness.report.cycle_svg.edge_evidence`);
* its transactions as one table of micro-ops (:func:`transactions_table`): per transaction its
  index (the completion op's), role in the example (writer, reader ...), process and outcome
  (committed, aborted, info), then one row per micro-op in order -- a send with its partition,
  value and acknowledged offset (``-``: the client never learned it), each record a poll returned
  that matters to the finding (partition, offset, value; how many more it returned is said, not
  shown), and the end (commit or abort, with the time it began);
* hanging-transaction names no transaction of the history (it is found in the brokers' event
  logs, and the history records no producer ids): its example shows the producer id, the
  transactional id the coordinator knew it by and the offsets held, not micro-ops.

Nothing here is read from disk, and no input stops the page: a field that is missing or of the
wrong type shows as ``-`` or ``?``, an example that is not an object as its JSON.  Everything
shown is escaped (:func:`harness.report.html_page.esc`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from checker.anomaly_order import ordered
from checker.definitions import G1A, HANGING_TRANSACTION, TXN_CHECKS
from harness.report.cycle_svg import cycle_svg, edge_evidence
from harness.report.html_page import cell, esc, records_table

TXN_KINDS: Final[frozenset[str]] = frozenset({*TXN_CHECKS, G1A, HANGING_TRANSACTION})
"""The anomalies this section shows."""
ROLES: Final[dict[str, str]] = {
    "send": "writer",
    "writer": "writer",
    "txn": "",
    "read": "reader",
    "reader": "reader",
    "first": "processed it first",
    "second": "processed it again",
    "committed_past": "committed the group's offset past it",
}
"""An example's field holding a transaction -> the role shown beside it, in the order shown."""
OUTCOMES: Final[dict[str, str]] = {"ok": "committed", "fail": "aborted", "info": "info (unknown)"}
"""A ``txn`` op's type -> the transaction's outcome as the table says it."""
FIRST_FACTS: Final = ("partition", "prev_offset", "offset", "prev_value", "value")
"""The facts shown first (results.json sorts a transactional example's keys)."""
TIME_FACTS: Final = frozenset({"read_completed", "commit_began", "writer_invoked"})
"""Facts that are history times (ns), shown in seconds like the micro-ops' times."""
COLUMNS: Final = ("transaction", "process", "outcome", "#", "micro-op", "partition", "offset", "value")


@dataclasses.dataclass(frozen=True, slots=True)
class MicroOp:
    """One row of a transaction's table: a send, one record of a poll (or drain), or the end."""

    item: Any
    """The micro-op's position in its transaction (None: not known, or the end)."""
    f: str
    partition: Any = None
    offset: Any = None
    value: Any = None
    key: Any = None
    time: Any = None


@dataclasses.dataclass(frozen=True, slots=True)
class Txn:
    """A transaction (or a plain read op) as the table shows it."""

    index: Any
    process: Any
    type: str
    transactional: bool
    micro_ops: list[MicroOp]
    hidden: int = 0
    """Records its polls returned that the example leaves out (not part of the finding)."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def is_view(value: Any) -> bool:
    """Whether ``value`` is a transaction as the transactional checks give it (:meth:`checker.txn.examples.Views.txn`)."""
    return isinstance(value, dict) and "index" in value and isinstance(value.get("sends"), list)


def is_op(value: Any) -> bool:
    """Whether ``value`` is a history op (a G1a example's ``send`` and ``read``)."""
    return isinstance(value, dict) and {"index", "type", "f"} <= set(value)


def from_view(txn: Mapping[str, Any]) -> Txn:
    """A :meth:`checker.txn.examples.Views.txn` transaction, its sends and reads in micro-op order."""
    rows = [
        MicroOp(s.get("item"), "send", s.get("partition"), s.get("offset"), s.get("value"))
        for s in _dicts(txn.get("sends"))
    ]
    reads = _dicts(txn.get("reads"))
    rows += [
        MicroOp(r.get("item"), "poll", r.get("partition"), r.get("offset"), r.get("value")) for r in reads
    ]
    rows += [
        MicroOp(o.get("item"), "send-offsets", o.get("partition"), o.get("offset"))
        for o in _dicts(txn.get("offsets_sent"))
    ]
    rows.sort(key=lambda row: (_int(row.item) is None, _int(row.item) or 0))
    end = txn.get("end")
    if isinstance(end, dict):
        rows.append(MicroOp(None, str(end.get("f")), time=end.get("time")))
    total = _int(txn.get("records_read"))
    return Txn(
        txn.get("index"),
        txn.get("process"),
        str(txn.get("type")),
        True,
        rows,
        max(0, total - len(reads)) if total is not None else 0,
    )


def _record(item: Any, f: str, record: Mapping[str, Any], partition: Any = None) -> MicroOp:
    return MicroOp(
        item,
        f,
        record.get("partition", partition),
        record.get("offset"),
        record.get("value"),
        record.get("key"),
    )


def from_op(op: Mapping[str, Any]) -> Txn:
    """A history op: a ``txn`` op's micro-ops (as the example trimmed them: their positions are
    not the transaction's, so none is shown), a poll's records, a drain's, a send."""
    f, value = str(op.get("f")), op.get("value")
    rows: list[MicroOp] = []
    if f == "txn":
        for micro in _dicts(value):
            kind = str(micro.get("f"))
            if kind == "poll":
                rows += [_record(None, kind, record) for record in _dicts(micro.get("records"))]
            elif kind == "send":
                rows.append(_record(None, kind, micro))
            else:
                rows.append(MicroOp(None, kind, time=micro.get("time")))
    elif f == "poll":
        rows = [_record(None, f, record) for record in _dicts(value)]
    elif isinstance(value, dict) and isinstance(value.get("records"), list):  # a drain
        rows = [_record(None, f, record, value.get("partition")) for record in _dicts(value["records"])]
    elif isinstance(value, dict):  # a send
        rows = [_record(None, f, value)]
    return Txn(op.get("index"), op.get("process"), str(op.get("type")), f == "txn", rows)


def _seconds(time: Any) -> str:
    number = _int(time)
    return f"{number / 1e9:.6f} s" if number is not None else cell(time)


def _micro_cells(micro: MicroOp, keys: bool) -> str:
    name = f"{micro.f} (began at {_seconds(micro.time)})" if micro.f in ("commit", "abort") else esc(micro.f)
    numbers = [cell(micro.offset), cell(micro.value)]
    return (
        f'<td class="num">{cell(micro.item)}</td><td>{name}</td><td class="num">{cell(micro.partition)}</td>'
        + (f"<td>{cell(micro.key)}</td>" if keys else "")
        + "".join(f'<td class="num">{text}</td>' for text in numbers)
    )


def _txn_rows(role: str, txn: Txn, keys: bool) -> str:
    rows = [_micro_cells(micro, keys) for micro in txn.micro_ops]
    width = len(COLUMNS) - 3 + (1 if keys else 0)
    if txn.hidden:
        rows.append(
            f'<td colspan="{width}" class="note">its polls returned {txn.hidden} more record(s),'
            " not part of this finding</td>"
        )
    if not rows:
        rows.append(f'<td colspan="{width}" class="note">no micro-op recorded</td>')
    outcome = OUTCOMES.get(txn.type, txn.type) if txn.transactional else txn.type
    label = f"#{esc(txn.index)}" + (f' <span class="note">{esc(role)}</span>' if role else "")
    head = (
        f'<td rowspan="{len(rows)}">{label}</td><td rowspan="{len(rows)}" class="num">{cell(txn.process)}</td>'
        f'<td rowspan="{len(rows)}" class="op-{esc(txn.type)}">{esc(outcome)}</td>'
    )
    return "".join(
        f'<tr data-txn="{esc(txn.index)}">{head if number == 0 else ""}{row}</tr>'
        for number, row in enumerate(rows)
    )


def transactions_table(txns: Sequence[tuple[str, Txn]]) -> str:
    """(role, transaction) pairs as one table, a row per micro-op (see the module docstring);
    a ``key`` column only when some micro-op has a key (the transactional checks' own examples
    carry none: the workload's key is ``k<partition>``, ``docs/history.md``)."""
    keys = any(micro.key is not None for _, txn in txns for micro in txn.micro_ops)
    columns = [*COLUMNS[:6], *(["key"] if keys else []), *COLUMNS[6:]]
    head = "".join(f"<th>{esc(column)}</th>" for column in columns)
    body = "".join(_txn_rows(role, txn, keys) for role, txn in txns)
    return f'<table class="txn-ops"><tr>{head}</tr>{body}</table>'


def _fact(name: str, value: Any) -> Any:
    if name in TIME_FACTS:
        return _seconds(value) if _int(value) is not None else value
    pairs = _dicts(value)
    if pairs and all({"partition", "value"} <= set(pair) for pair in pairs):
        return "; ".join(f"partition {pair['partition']} value {pair['value']}" for pair in pairs)
    return value


def _facts_table(facts: Mapping[str, Any]) -> str:
    names = [name for name in FIRST_FACTS if name in facts] + [
        name for name in facts if name not in FIRST_FACTS
    ]
    return (
        records_table([{name.replace("_", " "): _fact(name, facts[name]) for name in names}]) if names else ""
    )


def _cycle_html(example: Mapping[str, Any]) -> str:
    steps = _dicts(example.get("steps"))
    txns = [from_view(txn) for txn in _dicts(example.get("txns")) if is_view(txn)]
    length = _int(example.get("length")) or len(steps)
    cut = f"; its first {len(steps)} steps shown" if length > len(steps) else ""
    rows = "".join(
        f'<tr><td class="num">{number}</td><td>#{esc(step.get("from"))}</td><td>#{esc(step.get("to"))}</td>'
        f"<td>{esc(step.get('kind'))}</td><td>{esc(edge_evidence(step))}</td></tr>"
        for number, step in enumerate(steps, 1)
    )
    table = (
        f"<table><tr><th>step</th><th>from</th><th>to</th><th>kind</th><th>evidence</th></tr>{rows}</table>"
    )
    drawing = cycle_svg(steps, {txn.index: txn.process for txn in txns if _int(txn.index) is not None})
    return (
        f"<p>a cycle of {length} transactions{esc(cut)}:</p>"
        f'<div class="grid" style="align-items:center">{drawing}<div>{table}</div></div>'
        + transactions_table([("", txn) for txn in txns])
    )


def _hanging_html(example: Mapping[str, Any]) -> str:
    opened, last = _dict(example.get("opened")), _dict(example.get("coordinator_last"))
    facts = {
        "partition": example.get("partition"),
        "leader": example.get("node"),
        "producer id": opened.get("producer_id"),
        "epoch": opened.get("producer_epoch"),
        "transactional id": last.get("transactional_id"),
        "coordinator's last state": last.get("state"),
        "first offset": example.get("first_offset"),
        "last stable offset": example.get("lso"),
        "offsets held": example.get("held"),
    }
    return (
        '<p class="note">found in the brokers\' event logs: the history records no producer id, so no'
        " transaction of it is named (the events are in the anomaly table).</p>" + records_table([facts])
    )


def _plain_html(example: Mapping[str, Any]) -> str:
    held = {name: value for name, value in example.items() if is_view(value) or is_op(value)}
    order = list(ROLES)
    names = sorted(held, key=lambda name: (order.index(name) if name in order else len(order), name))
    txns: dict[Any, tuple[str, Txn]] = {}
    for name in names:
        role, txn = (
            ROLES.get(name, name),
            from_view(held[name]) if is_view(held[name]) else from_op(held[name]),
        )
        if str(txn.index) in txns:  # one transaction in two roles (a read of its own write): shown once
            other_role, other = txns[str(txn.index)]
            role = f"{other_role} and {role}"
            txn = max(other, txn, key=lambda shown: len(shown.micro_ops))
        txns[str(txn.index)] = (role, txn)
    facts = {name: value for name, value in example.items() if name not in held}
    return _facts_table(facts) + (transactions_table(list(txns.values())) if txns else "")


def example_html(name: str, example: Any) -> str:
    """One example of anomaly ``name`` (see the module docstring)."""
    if not isinstance(example, dict):
        return f"<p>{cell(example)}</p>"
    if name == HANGING_TRANSACTION:
        return _hanging_html(example)
    if isinstance(example.get("steps"), list):
        return _cycle_html(example)
    return _plain_html(example)


def txn_section(results: Mapping[str, Any] | None) -> str:
    """The section (its ``<h2>`` included) for ``results`` (``results.json``), or "" when the run
    reported no transactional anomaly; anomalies in the anomaly table's order, causes first."""
    anomalies = (results or {}).get("anomalies")
    if not isinstance(anomalies, dict):
        return ""
    found = {name: anomaly for name, anomaly in anomalies.items() if isinstance(anomaly, dict)}
    parts = []
    for name in [placed.name for placed in ordered(found) if placed.name in TXN_KINDS]:
        examples = found[name].get("examples")
        examples = examples if isinstance(examples, list) else []
        count = found[name].get("count", len(examples))
        note = esc(f"{len(examples)} of {count} shown" if examples else "no examples recorded")
        body = "".join(
            f'<div class="txn-example"><h3>{esc(name)} example {number}</h3>{example_html(name, example)}</div>'
            for number, example in enumerate(examples, 1)
        )
        parts.append(
            f'<details open id="txn-{esc(name)}"><summary>{esc(name)} x{esc(count)} <span class="note">({note};'
            f' every field in the <a href="#anomaly-{esc(name)}">anomaly table</a>)</span></summary>{body}</details>'
        )
    if not parts:
        return ""
    return (
        '<h2 id="transactions">Transactional anomalies</h2><p class="note">Each example\'s transactions,'
        " a row per micro-op in order: sends with the offset the broker acknowledged (- when the client"
        " never learned it), the records a poll returned that the finding is about, and the end (commit or"
        " abort) with the time it began. A transaction is named by its completion op's index (#); a cycle is"
        " drawn with its edges: ww (log order), wr (a read), process and realtime order.</p>" + "".join(parts)
    )
