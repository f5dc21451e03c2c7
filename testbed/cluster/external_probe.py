"""The first look at an external cluster (``--bootstrap``), before a run starts.

A run against a cluster the harness did not start fails for reasons that are the
cluster's or the command line's, not bugs in Tidemark, so each one is reported as one
line naming the address and what failed:

* a malformed address (``foo``, ``host:70000``) -- :class:`BootstrapAddressError`,
  bad arguments;
* nothing answers (connection refused, a host that does not resolve, no answer in time),
  or what answers does not speak Kafka (closes the connection, answers garbage) --
  :class:`ExternalClusterError`;
* a broker whose protocol versions Tidemark's clients cannot use (its ApiVersions ranges
  miss the ones in :data:`broker_impl.wire.APIS`, which both clients negotiate) --
  :class:`ExternalClusterError`;
* a cluster that refuses the run's topic (asked with CreateTopics ``validate_only``, so
  a policy, an ACL or the replication factor is checked without creating anything) --
  :class:`ExternalClusterError`, or :class:`ClusterMismatch` when the partitions or the
  replication factor asked for do not fit the cluster (bad arguments).  The bundled
  broker ignores ``validate_only`` and creates the topic, with the very layout the
  runner then asks for and checks.

The probe speaks the Kafka protocol itself (kafka-python's codec through
:mod:`broker_impl.wire`) on plain asyncio connections, so every step has a deadline
within :data:`PROBE_TIMEOUT` seconds in all -- an admin client retrying internally took
half a minute to say that nothing listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import time
from typing import Any

from broker_impl import wire

PROBE_TIMEOUT = 10.0
"""Seconds the whole probe may take: connecting, ApiVersions, Metadata and CreateTopics."""

CLIENT_ID = "tidemark-probe"

REQUIRED_APIS = (0, 1, 2, 3, 19)
"""What a run uses: Produce, Fetch, ListOffsets, Metadata (clients) and CreateTopics (the harness)."""

_DETAIL_LIMIT = 160
_RETRY_PAUSE = 0.5


class BootstrapAddressError(ValueError):
    """``--bootstrap`` is not a list of ``HOST:PORT``; the message names the bad entry."""


class ExternalClusterError(Exception):
    """The cluster at ``--bootstrap`` cannot be tested; one line naming the address and what failed."""


class ClusterMismatch(ExternalClusterError):
    """The cluster refuses the topic's partitions or replication factor: the arguments do not fit it."""


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` (IPv6 as ``[ADDR]:PORT``) -> ``[(host, port), ...]``."""
    entries = [entry.strip() for entry in bootstrap.split(",")]
    if not any(entries):
        raise BootstrapAddressError(f"--bootstrap {bootstrap!r}: expected HOST:PORT[,HOST:PORT...]")
    addresses = []
    for entry in entries:
        if not entry:
            continue
        # the bad entry, named on its own when the list has others
        where = f"--bootstrap {bootstrap}" + ("" if entry == bootstrap.strip() else f": {entry!r}")
        if "://" in entry:
            raise BootstrapAddressError(f"{where}: expected HOST:PORT, without a listener name")
        host, separator, port_text = entry.rpartition(":")
        if not separator or not host:
            raise BootstrapAddressError(f"--bootstrap {bootstrap}: {entry!r} is not HOST:PORT")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        elif ":" in host:
            raise BootstrapAddressError(f"{where}: an IPv6 address goes in brackets, [ADDR]:PORT")
        if not host or any(character.isspace() for character in host):
            raise BootstrapAddressError(f"{where}: bad host {host!r}")
        if not port_text.isdigit():
            raise BootstrapAddressError(f"{where}: port {port_text!r} is not a number")
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise BootstrapAddressError(f"{where}: port {port} is out of range (1-65535)")
        addresses.append((host, port))
    return addresses


def probe_cluster(
    bootstrap: str,
    topic: str | None = None,
    partitions: int = 1,
    replication_factor: int = 1,
    *,
    timeout: float = PROBE_TIMEOUT,
    wait: float = 0.0,
) -> None:
    """Check that ``bootstrap`` is a Kafka cluster the run can use; raise naming what is not.

    A broker must answer ApiVersions with ranges Tidemark's clients can use and Metadata
    with at least one broker; with ``topic``, the cluster's controller must accept a
    ``validate_only`` CreateTopics of ``partitions`` x ``replication_factor`` (or report
    that the topic exists: the runner checks its layout).  Each step has a deadline within
    ``timeout`` seconds.  ``wait`` > 0 (brokers the harness has just started) asks again
    for up to that many seconds while no broker answers.
    """
    addresses = parse_bootstrap(bootstrap)
    asyncio.run(_probe(bootstrap, addresses, topic, partitions, replication_factor, timeout, wait))


# ---- the probe ------------------------------------------------------------------------------


class _Failed(Exception):
    """What went wrong at one address, as a phrase ("connection refused")."""


@dataclasses.dataclass
class _Session:
    """An open connection to one broker that answered ApiVersions."""

    address: str
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    ranges: dict[int, tuple[int, int]]
    correlation_id: int = 0

    def close(self) -> None:
        self.writer.close()


def _one_line(text: object) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= _DETAIL_LIMIT else line[: _DETAIL_LIMIT - 3] + "..."


def _format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _broker(prefix: str, address: str) -> str:
    """``address`` as the subject of a message, unless ``prefix`` already names it alone."""
    return "the broker" if prefix == f"--bootstrap {address}" else f"the broker at {address}"


def _api_name(key: int) -> str:
    api = wire.APIS.get(key)
    return str(api.request.__name__).removesuffix("Request") if api else f"API {key}"


def _remaining(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)


async def _connect(host: str, port: int, deadline: float, budget: float) -> tuple[Any, Any]:
    try:
        async with asyncio.timeout(_remaining(deadline)):
            return await asyncio.open_connection(host, port)
    except TimeoutError:
        raise _Failed(f"no connection within {budget:g} s") from None
    except ConnectionRefusedError:
        raise _Failed("connection refused") from None
    except socket.gaierror as error:
        raise _Failed(f"cannot resolve {host} ({_one_line(error.strerror)})") from None
    except OSError as error:
        raise _Failed(_one_line(error.strerror or error)) from None


async def _call(session: _Session, message: Any, version: int, deadline: float, budget: float) -> Any:
    """One request on ``session``; :class:`_Failed` saying how the answer was missing or wrong."""
    name = _api_name(int(message.API_KEY))
    response_class = wire.APIS[int(message.API_KEY)].response
    session.correlation_id += 1
    try:
        async with asyncio.timeout(_remaining(deadline)):
            session.writer.write(wire.encode_request(message, session.correlation_id, CLIENT_ID))
            await session.writer.drain()
            payload = await wire.read_frame(session.reader)
    except TimeoutError:
        raise _Failed(f"no answer to {name} within {budget:g} s") from None
    except asyncio.IncompleteReadError as error:
        hint = ": not a Kafka listener, or one that needs TLS?" if name == "ApiVersions" else ""
        when = "before" if not error.partial else "in the middle of"
        raise _Failed(f"the connection was closed {when} an answer to {name}{hint}") from None
    except wire.ProtocolError as error:
        raise _Failed(f"the answer to {name} is not Kafka: {_one_line(error)}") from None
    except OSError as error:
        raise _Failed(f"the connection failed on {name}: {_one_line(error.strerror or error)}") from None
    try:
        correlation_id, body = wire.decode_response(response_class, version, payload)
    except Exception as error:  # the codec raises many kinds on garbage
        raise _Failed(
            f"the answer to {name} is not Kafka: {len(payload)} bytes that do not decode "
            f"({_one_line(type(error).__name__)})"
        ) from None
    if correlation_id != session.correlation_id:
        raise _Failed(
            f"the answer to {name} is not Kafka: correlation id {correlation_id}, "
            f"expected {session.correlation_id}"
        )
    return body


async def _hello(host: str, port: int, deadline: float, budget: float) -> _Session:
    """Connect and ask ApiVersions (v0: every broker since Kafka 0.10 answers it)."""
    address = _format_address(host, port)
    reader, writer = await _connect(host, port, deadline, budget)
    session = _Session(address, reader, writer, {})
    try:
        api = wire.APIS[wire.API_VERSIONS_KEY]
        body = await _call(session, api.request(version=0), 0, deadline, budget)
        if body.error_code:
            raise _Failed(f"ApiVersions failed: {_error_name(body.error_code)}")
        session.ranges = {entry.api_key: (entry.min_version, entry.max_version) for entry in body.api_keys}
    except BaseException:
        session.close()
        raise
    return session


async def _first_answer(addresses: list[tuple[str, int]], deadline: float, budget: float) -> _Session:
    """The first broker of ``addresses`` to answer ApiVersions (all are asked at once)."""
    tasks = {
        asyncio.ensure_future(_hello(host, port, deadline, budget)): _format_address(host, port)
        for host, port in addresses
    }
    reasons: dict[str, str] = {}
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                error = task.exception()
                if error is None:
                    return task.result()
                if not isinstance(error, _Failed):
                    raise error
                reasons[tasks[task]] = str(error)
    finally:
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(BaseException):
                (await task).close()
    ordered = [reasons[address] for address in tasks.values()]
    if len(ordered) == 1:
        raise _Failed(ordered[0])
    raise _Failed("; ".join(f"{address}: {reasons[address]}" for address in tasks.values()))


def _error_name(code: int) -> str:
    from kafka.errors import for_code

    return f"{getattr(for_code(code), 'message', 'UNKNOWN')} ({code})"


def _negotiate(ranges: dict[int, tuple[int, int]], key: int) -> int | None:
    """The highest version of API ``key`` both the broker and Tidemark's clients speak."""
    if key not in ranges:
        return None
    api = wire.APIS[key]
    low = max(ranges[key][0], api.min_version)
    high = min(ranges[key][1], api.max_version)
    return high if low <= high else None


def _unsupported(ranges: dict[int, tuple[int, int]]) -> list[str]:
    problems = []
    for key in REQUIRED_APIS:
        api = wire.APIS[key]
        need = f"v{api.min_version}-{api.max_version}"
        if key not in ranges:
            problems.append(f"no {_api_name(key)} (need {need})")
        elif _negotiate(ranges, key) is None:
            low, high = ranges[key]
            offered = f"v{low}" if low == high else f"v{low}-{high}"
            problems.append(f"{_api_name(key)} {offered} (need {need})")
    return problems


async def _probe(
    bootstrap: str,
    addresses: list[tuple[str, int]],
    topic: str | None,
    partitions: int,
    replication_factor: int,
    timeout: float,
    wait: float,
) -> None:
    prefix = f"--bootstrap {bootstrap}"
    started = time.monotonic()
    while True:
        try:
            session = await _first_answer(addresses, time.monotonic() + timeout, timeout)
            break
        except _Failed as error:
            if time.monotonic() - started + _RETRY_PAUSE >= wait:
                within = f" within {wait:g} s" if wait > 0 else ""
                raise ExternalClusterError(f"{prefix}: no Kafka broker answered{within} ({error})") from None
        await asyncio.sleep(_RETRY_PAUSE)
    deadline = time.monotonic() + timeout
    try:
        problems = _unsupported(session.ranges)
        if problems:
            raise ExternalClusterError(
                f"{prefix}: {_broker(prefix, session.address)} speaks protocol versions Tidemark's clients do not: "
                + ", ".join(problems)
            )
        brokers, controller = await _metadata(session, prefix, deadline, timeout)
        if topic is not None:
            await _validate_topic(
                session, brokers, controller, topic, partitions, replication_factor, prefix, deadline, timeout
            )
    finally:
        session.close()


async def _metadata(
    session: _Session, prefix: str, deadline: float, budget: float
) -> tuple[dict[int, tuple[str, int]], int]:
    version = _negotiate(session.ranges, 3)
    assert version is not None
    request = wire.APIS[3].request(
        version=version,
        topics=[] if version >= 1 else None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    try:
        body = await _call(session, request, version, deadline, budget)
    except _Failed as error:
        raise ExternalClusterError(f"{prefix}: {_broker(prefix, session.address)}: {error}") from None
    brokers = {broker.node_id: (broker.host, broker.port) for broker in body.brokers}
    if not brokers:
        raise ExternalClusterError(
            f"{prefix}: {_broker(prefix, session.address)} answered Metadata with no brokers"
        )
    controller = getattr(body, "controller_id", -1)
    return brokers, controller if controller in brokers else -1


async def _validate_topic(
    session: _Session,
    brokers: dict[int, tuple[str, int]],
    controller: int,
    topic: str,
    partitions: int,
    replication_factor: int,
    prefix: str,
    deadline: float,
    budget: float,
) -> None:
    """CreateTopics with ``validate_only``, sent to the controller as admin clients do."""
    target = session
    if controller >= 0 and _format_address(*brokers[controller]) != session.address:
        host, port = brokers[controller]
        try:
            target = await _hello(host, port, deadline, budget)
        except _Failed as error:
            raise ExternalClusterError(
                f"{prefix}: {_broker(prefix, session.address)} names broker {controller} at {_format_address(host, port)} "
                f"as the controller, which does not answer ({error}; check advertised.listeners)"
            ) from None
    try:
        version = _negotiate(target.ranges, 19)
        if version is None:
            problems = ", ".join(_unsupported(target.ranges))
            raise ExternalClusterError(
                f"{prefix}: {_broker(prefix, target.address)} speaks protocol versions Tidemark's clients do not: {problems}"
            )
        api = wire.APIS[19]
        creatable = wire.nested(api.request, "CreatableTopic")(
            name=topic,
            num_partitions=partitions,
            replication_factor=replication_factor,
            assignments=[],
            configs=[],
        )
        request = api.request(
            version=version,
            topics=[creatable],
            timeout_ms=int(_remaining(deadline) * 1000),
            validate_only=True,
        )
        try:
            body = await _call(target, request, version, deadline, budget)
        except _Failed as error:
            raise ExternalClusterError(f"{prefix}: {_broker(prefix, target.address)}: {error}") from None
    finally:
        if target is not session:
            target.close()
    results = [result for result in body.topics if result.name == topic]
    code = results[0].error_code if results else None
    if code in (wire.NONE, wire.TOPIC_ALREADY_EXISTS):
        return
    message = getattr(results[0], "error_message", None) if results else None
    what = (
        f"{prefix}: the cluster refuses to create topic {topic} "
        f"({partitions} partitions, replication factor {replication_factor}): "
        + (_error_name(code) if code is not None else "no result for the topic")
        + (f": {_one_line(message)}" if message else "")
    )
    if code in (wire.INVALID_PARTITIONS, wire.INVALID_REPLICATION_FACTOR):
        raise ClusterMismatch(f"{what} (see --partitions, --replication-factor)")
    raise ExternalClusterError(what)
