"""Kafka API handlers of the group coordinator: one method per API, each returning a response body.

FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
DescribeGroups and ListGroups, at the versions of :data:`broker_impl.wire.APIS`.  This
module only translates between the wire's per-version fields and
:class:`~broker_impl.group_coordinator.GroupCoordinator`; the rules live there and in
:mod:`broker_impl.group_state`.  Version differences handled here, as Kafka handles them:

* JoinGroup v0 has no rebalance timeout (the session timeout serves); from v4 a member without
  an id gets MEMBER_ID_REQUIRED (KIP-394); protocol type and name are nullable from v7.
* LeaveGroup v0-2 names one member; v3+ a list, answered member by member.
* OffsetCommit carries a leader epoch from v6; OffsetFetch returns it from v5, has a
  top-level error from v2, a null topic list ("every partition") from v2, and from v8 asks
  for several groups at once; from v7 ``require_stable`` asks for UNSTABLE_OFFSET_COMMIT on a
  partition whose transactional commit is still pending (KIP-447).
* FindCoordinator v4+ (KIP-699) batches keys.  Key type 0 is a group; the broker hands in the
  locators of other key types (1: a transactional id, :mod:`broker_impl.txn_coordinator`); an
  unknown key type is answered INVALID_REQUEST.

Group ids must be non-empty for the membership APIs (INVALID_GROUP_ID); OffsetCommit and
OffsetFetch accept any id, as Kafka does.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from . import wire
from .group_coordinator import GroupCoordinator
from .group_records import CommittedOffset
from .group_state import GroupState

Handler = Callable[[wire.Request], Awaitable[Any]]
Locator = Callable[[str], Awaitable[tuple[int, int, str, int]]]
GROUP_KEY_TYPE = 0
UNSTABLE_OFFSET_COMMIT = 88


class GroupHandlers:
    def __init__(
        self,
        coordinator: GroupCoordinator,
        client_host: str = "",
        locators: Mapping[int, Locator] | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.client_host = client_host
        self.locators: dict[int, Locator] = {GROUP_KEY_TYPE: coordinator.locate, **(locators or {})}

    def table(self) -> dict[int, Handler]:
        return {
            8: self.offset_commit,
            9: self.offset_fetch,
            10: self.find_coordinator,
            11: self.join_group,
            12: self.heartbeat,
            13: self.leave_group,
            14: self.sync_group,
            15: self.describe_groups,
            16: self.list_groups,
        }

    # ---- FindCoordinator ----------------------------------------------------------------------

    async def find_coordinator(self, request: wire.Request) -> Any:
        body = request.body
        key_type = body.key_type if request.version >= 1 else GROUP_KEY_TYPE
        keys = list(body.coordinator_keys) if request.version >= 4 else [body.key]
        answers: list[tuple[str, int, str | None, int, str, int]] = []
        for key in keys:
            locate = self.locators.get(key_type)
            if locate is None:
                refusal = f"key type {key_type}: only {sorted(self.locators)} are served"
                answers.append((key, wire.INVALID_REQUEST, refusal, -1, "", -1))
                continue
            error, node, host, port = await locate(key)
            answers.append((key, error, None, node, host, port))
        if request.version >= 4:
            coordinator_class = wire.nested(request.api.response, "Coordinator")
            return wire.response(
                request,
                throttle_time_ms=0,
                coordinators=[
                    coordinator_class(
                        key=key, node_id=node, host=host, port=port, error_code=error, error_message=message
                    )
                    for key, error, message, node, host, port in answers
                ],
            )
        _, error, message, node, host, port = answers[0]
        return wire.response(
            request,
            throttle_time_ms=0,
            error_code=error,
            error_message=message,
            node_id=node,
            host=host,
            port=port,
        )

    # ---- membership ---------------------------------------------------------------------------

    async def join_group(self, request: wire.Request) -> Any:
        body = request.body
        if not body.group_id:
            return self._join_response(request, wire.INVALID_GROUP_ID, body.member_id)
        outcome = await self.coordinator.join(
            body.group_id,
            member_id=body.member_id,
            client_id=request.client_id or "",
            client_host=self.client_host,
            session_timeout_ms=body.session_timeout_ms,
            rebalance_timeout_ms=body.rebalance_timeout_ms
            if request.version >= 1
            else body.session_timeout_ms,
            protocol_type=body.protocol_type,
            protocols=[(protocol.name, bytes(protocol.metadata)) for protocol in body.protocols],
            require_known_member_id=request.version >= 4,
        )
        member_class = wire.nested(request.api.response, "JoinGroupResponseMember")
        return self._join_response(
            request,
            outcome.error,
            outcome.member_id,
            generation_id=outcome.generation_id,
            protocol_type=outcome.protocol_type,
            protocol_name=outcome.protocol_name,
            leader=outcome.leader,
            members=[
                member_class(member_id=member_id, group_instance_id=None, metadata=metadata)
                for member_id, metadata in outcome.members
            ],
        )

    @staticmethod
    def _join_response(
        request: wire.Request,
        error: int,
        member_id: str,
        generation_id: int = -1,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        leader: str = "",
        members: list[Any] | None = None,
    ) -> Any:
        nullable = request.version >= 7
        return wire.response(
            request,
            throttle_time_ms=0,
            error_code=error,
            generation_id=generation_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name if nullable else protocol_name or "",
            leader=leader,
            skip_assignment=False,
            member_id=member_id,
            members=members or [],
        )

    async def sync_group(self, request: wire.Request) -> Any:
        body = request.body
        flexible_protocol = request.version >= 5
        if not body.group_id:
            return wire.response(
                request, throttle_time_ms=0, error_code=wire.INVALID_GROUP_ID, assignment=b""
            )
        outcome = await self.coordinator.sync(
            body.group_id,
            member_id=body.member_id,
            generation_id=body.generation_id,
            protocol_type=body.protocol_type if flexible_protocol else None,
            protocol_name=body.protocol_name if flexible_protocol else None,
            assignments={entry.member_id: bytes(entry.assignment) for entry in body.assignments},
        )
        return wire.response(
            request,
            throttle_time_ms=0,
            error_code=outcome.error,
            protocol_type=outcome.protocol_type,
            protocol_name=outcome.protocol_name,
            assignment=outcome.assignment,
        )

    async def heartbeat(self, request: wire.Request) -> Any:
        body = request.body
        error = (
            self.coordinator.heartbeat(body.group_id, body.member_id, body.generation_id)
            if body.group_id
            else wire.INVALID_GROUP_ID
        )
        return wire.response(request, throttle_time_ms=0, error_code=error)

    async def leave_group(self, request: wire.Request) -> Any:
        body = request.body
        member_ids = [body.member_id] if request.version <= 2 else [m.member_id for m in body.members]
        if body.group_id:
            error, errors = self.coordinator.leave(body.group_id, member_ids)
        else:
            error, errors = wire.INVALID_GROUP_ID, [wire.INVALID_GROUP_ID] * len(member_ids)
        if request.version <= 2:
            return wire.response(request, throttle_time_ms=0, error_code=error or errors[0])
        member_class = wire.nested(request.api.response, "MemberResponse")
        return wire.response(
            request,
            throttle_time_ms=0,
            error_code=error,
            members=[
                member_class(member_id=member_id, group_instance_id=None, error_code=member_error)
                for member_id, member_error in zip(member_ids, errors, strict=True)
            ],
        )

    # ---- offsets ------------------------------------------------------------------------------

    async def offset_commit(self, request: wire.Request) -> Any:
        body = request.body
        now = int(time.time() * 1000)
        wanted = [
            (
                topic.name,
                entry.partition_index,
                CommittedOffset(
                    offset=entry.committed_offset,
                    leader_epoch=entry.committed_leader_epoch if request.version >= 6 else -1,
                    metadata=entry.committed_metadata or "",
                    commit_timestamp=now,
                ),
            )
            for topic in body.topics
            for entry in topic.partitions
        ]
        errors = await self.coordinator.commit(
            body.group_id, body.member_id, body.generation_id_or_member_epoch, wanted
        )
        topic_class = wire.nested(request.api.response, "OffsetCommitResponseTopic")
        partition_class = wire.nested(topic_class, "OffsetCommitResponsePartition")
        by_topic: dict[str, list[Any]] = {}
        for (topic_name, index, _), error in zip(wanted, errors, strict=True):
            by_topic.setdefault(topic_name, []).append(
                partition_class(partition_index=index, error_code=error)
            )
        return wire.response(
            request,
            throttle_time_ms=0,
            topics=[topic_class(name=name, partitions=partitions) for name, partitions in by_topic.items()],
        )

    async def offset_fetch(self, request: wire.Request) -> Any:
        body = request.body
        if request.version >= 8:
            group_class = wire.nested(request.api.response, "OffsetFetchResponseGroup")
            groups = []
            for group in body.groups:
                error, topics = self._fetched(
                    request, group.group_id, group.topics, "OffsetFetchResponseGroup"
                )
                groups.append(group_class(group_id=group.group_id, topics=topics, error_code=error))
            return wire.response(request, throttle_time_ms=0, groups=groups)
        error, topics = self._fetched(request, body.group_id, body.topics, None)
        return wire.response(request, throttle_time_ms=0, topics=topics, error_code=error)

    def _fetched(
        self, request: wire.Request, group_id: str, requested: list[Any] | None, group_struct: str | None
    ) -> tuple[int, list[Any]]:
        """(group-level error, response topics) for one group of an OffsetFetch."""
        if group_struct is None:
            topic_class = wire.nested(request.api.response, "OffsetFetchResponseTopic")
            partition_class = wire.nested(topic_class, "OffsetFetchResponsePartition")
        else:
            topic_class = wire.nested(request.api.response, group_struct, "OffsetFetchResponseTopics")
            partition_class = wire.nested(topic_class, "OffsetFetchResponsePartitions")
        wanted = (
            None
            if requested is None
            else [(topic.name, index) for topic in requested for index in topic.partition_indexes]
        )
        error, committed = self.coordinator.fetch_offsets(group_id, wanted)
        if error and wanted is not None and request.version < 2:
            # v0-1 have no group-level error: every partition carries it.
            committed = dict.fromkeys(wanted)
        elif error:
            return error, []
        unstable = self._unstable(group_id) if request.version >= 7 and request.body.require_stable else set()
        by_topic: dict[str, list[Any]] = {}
        for (topic_name, index), value in committed.items():
            if (topic_name, index) in unstable:
                value = None
            by_topic.setdefault(topic_name, []).append(
                partition_class(
                    partition_index=index,
                    committed_offset=value.offset if value is not None else -1,
                    committed_leader_epoch=value.leader_epoch if value is not None else -1,
                    metadata=value.metadata if value is not None else "",
                    error_code=UNSTABLE_OFFSET_COMMIT if (topic_name, index) in unstable else error,
                )
            )
        return wire.NONE, [
            topic_class(name=name, partitions=partitions) for name, partitions in by_topic.items()
        ]

    def _unstable(self, group_id: str) -> set[tuple[str, int]]:
        """The partitions of ``group_id`` with a transactional commit awaiting its marker: a
        require_stable OffsetFetch (KIP-447, read_committed consumers) gets UNSTABLE_OFFSET_COMMIT
        for them and retries, rather than an offset the transaction is about to replace."""
        _, state = self.coordinator.owner(group_id)
        if state is None:
            return set()
        return {
            (key.topic, key.partition)
            for entries in state.pending_transactions.values()
            for key, _, _ in entries
            if key.group == group_id
        }

    # ---- DescribeGroups / ListGroups -------------------------------------------------------------

    async def describe_groups(self, request: wire.Request) -> Any:
        group_class = wire.nested(request.api.response, "DescribedGroup")
        member_class = wire.nested(group_class, "DescribedGroupMember")
        described = []
        for group_id in request.body.groups:
            error, group = self.coordinator.describe(group_id)
            state, protocol_type, protocol, members = "Dead" if not error else "", "", "", []
            if group is not None:
                state = group.state.value
                protocol_type = group.protocol_type or ""
                protocol = group.protocol_name or ""
                stable = group.state is GroupState.STABLE
                members = [
                    member_class(
                        member_id=member.member_id,
                        group_instance_id=None,
                        client_id=member.client_id,
                        client_host=member.client_host,
                        member_metadata=member.metadata_for(group.protocol_name) if stable else b"",
                        member_assignment=member.assignment if stable else b"",
                    )
                    for member in group.members.values()
                ]
            described.append(
                group_class(
                    error_code=error,
                    error_message=None,
                    group_id=group_id,
                    group_state=state,
                    protocol_type=protocol_type,
                    protocol_data=protocol,
                    members=members,
                    authorized_operations=None,
                )
            )
        return wire.response(request, throttle_time_ms=0, groups=described)

    async def list_groups(self, request: wire.Request) -> Any:
        states = {state.lower() for state in request.body.states_filter} if request.version >= 4 else set()
        listed_class = wire.nested(request.api.response, "ListedGroup")
        loading = any(not state.loaded for state in self.coordinator.partitions.values())
        groups = [
            listed_class(
                group_id=group_id, protocol_type=protocol_type, group_state=state, group_type="classic"
            )
            for group_id, protocol_type, state in self.coordinator.list_groups()
            if not states or state.lower() in states
        ]
        return wire.response(
            request,
            throttle_time_ms=0,
            error_code=wire.COORDINATOR_LOAD_IN_PROGRESS if loading else wire.NONE,
            groups=groups,
        )
