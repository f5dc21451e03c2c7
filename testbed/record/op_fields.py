"""An op's value spread over the columns of ``history.parquet``: the fields of one send and of one
record read, validated.

Shared by the plain ops (:mod:`testbed.record.history`: ``send``, ``poll``, ``drain``) and the
micro-ops of a transaction (:mod:`testbed.record.txn_rows`), so that a send or a record means the
same columns whichever op carries it.  Every function raises ``ValueError`` with the reason; the
caller adds the file and line.
"""

from __future__ import annotations

from typing import Any

from testbed.record.history_lines import is_json_int

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def record_value(value: Any) -> tuple[int | None, str | None]:
    """A read record's value: an int64 goes to ``value``, a string to ``value_text``."""
    if is_json_int(value) and INT64_MIN <= value <= INT64_MAX:
        return value, None
    if isinstance(value, str):
        return None, value
    if value is None:
        return None, None
    raise ValueError(f"a record value must be an integer, a string or null, got {value!r}")


def check_key(key: Any) -> str | None:
    if key is not None and not isinstance(key, str):
        raise ValueError(f"a record key must be a string or null, got {key!r}")
    return key


SEND_FIELDS = frozenset({"partition", "key", "value", "offset"})


def send_fields(value: Any, extra: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The columns of one send ``{partition, key, value[, offset]}`` (``extra``: further keys the
    caller allows and reads itself, such as a micro-op's ``f``)."""
    if not isinstance(value, dict) or set(value) - SEND_FIELDS - extra:
        raise ValueError(f"a send value must be {{partition, key, value[, offset]}}, got {value!r}")
    if not is_json_int(value.get("partition")) or not is_json_int(value.get("value")):
        raise ValueError(f"a send value needs integer 'partition' and 'value', got {value!r}")
    if "offset" in value and not is_json_int(value["offset"]):
        raise ValueError(f"a send offset must be an integer, got {value['offset']!r}")
    return {
        "partition": value["partition"],
        "key": check_key(value.get("key")),
        "value": value["value"],
        "offset": value.get("offset"),
    }


def record_fields(record: Any, partition: int | None) -> dict[str, Any]:
    """The columns of one record read; ``partition`` given when the op names it once (a drain)."""
    expected = (
        {"offset", "key", "value"} if partition is not None else {"partition", "offset", "key", "value"}
    )
    if not isinstance(record, dict) or set(record) != expected:
        raise ValueError(f"a record must have exactly the fields {sorted(expected)}, got {record!r}")
    part = record["partition"] if partition is None else partition
    if not is_json_int(part) or not is_json_int(record["offset"]):
        raise ValueError(f"a record needs integer 'partition' and 'offset', got {record!r}")
    number, text = record_value(record["value"])
    return {
        "partition": part,
        "offset": record["offset"],
        "key": check_key(record["key"]),
        "value": number,
        "value_text": text,
    }
