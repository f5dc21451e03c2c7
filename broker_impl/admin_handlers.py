"""Membership admin APIs a broker forwards to the controller: ElectLeaders (43),
AlterPartitionReassignments (45) and ListPartitionReassignments (46).

In KRaft Kafka a client sends these to any broker (the Metadata answer names one as
"controller"), and the broker forwards them to the active controller, which decides and answers;
the broker relays the answer.  Tidemark's brokers do the same over the controller link
(:mod:`broker_impl.rpc`), the rules being the controller's (:mod:`broker_impl.reassignment`).  So
a real client -- kafka-python's ``KafkaAdminClient.alter_partition_reassignments``,
``list_partition_reassignments`` and ``elect_leaders`` -- drives them, as CreateTopics is driven.

A controller that cannot be reached is answered with REQUEST_TIMED_OUT at the top level
(ElectLeaders v0, which has no top-level code, per partition), so the client retries or fails
loudly; nothing is assumed to have happened.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from . import wire
from .rpc import RpcError

ControllerCall = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""``call(method, params)`` on the controller link: the reply, or ConnectionError / RpcError."""


class AdminHandlers:
    """The three APIs, forwarding through ``call`` (the broker's ``RpcClient.call``)."""

    def __init__(self, call: ControllerCall) -> None:
        self.call = call

    def table(self) -> dict[int, Any]:
        return {
            43: self.elect_leaders,
            45: self.alter_partition_reassignments,
            46: self.list_partition_reassignments,
        }

    async def _forward(self, method: str, params: dict[str, Any]) -> tuple[Any, str | None]:
        """(reply, None), or (None, why) when the controller could not answer."""
        try:
            return await self.call(method, params), None
        except (ConnectionError, RpcError) as error:
            return None, f"controller: {error}"

    @staticmethod
    def _unanswered(request: wire.Request, problem: str | None, **empty: Any) -> Any:
        """The answer when the controller could not be asked: REQUEST_TIMED_OUT, its reason."""
        return wire.response(
            request, throttle_time_ms=0, error_code=wire.REQUEST_TIMED_OUT, error_message=problem, **empty
        )

    async def alter_partition_reassignments(self, request: wire.Request) -> Any:
        topic_class = wire.nested(request.api.response, "ReassignableTopicResponse")
        partition_class = wire.nested(topic_class, "ReassignablePartitionResponse")
        params = {
            "topics": [
                {
                    "name": topic.name,
                    "partitions": [
                        {
                            "partition": p.partition_index,
                            "replicas": None if p.replicas is None else list(p.replicas),
                        }
                        for p in topic.partitions
                    ],
                }
                for topic in request.body.topics
            ]
        }
        reply, problem = await self._forward("alter_reassignments", params)
        if reply is None:
            return self._unanswered(request, problem, responses=[])
        responses = [
            topic_class(
                name=topic["name"],
                partitions=[
                    partition_class(
                        partition_index=p["partition"], error_code=p["error"], error_message=p["message"]
                    )
                    for p in topic["partitions"]
                ],
            )
            for topic in reply["topics"]
        ]
        return wire.response(
            request, throttle_time_ms=0, error_code=wire.NONE, error_message=None, responses=responses
        )

    async def list_partition_reassignments(self, request: wire.Request) -> Any:
        topic_class = wire.nested(request.api.response, "OngoingTopicReassignment")
        partition_class = wire.nested(topic_class, "OngoingPartitionReassignment")
        wanted = request.body.topics
        params = {
            "topics": None
            if wanted is None
            else [{"name": t.name, "partitions": list(t.partition_indexes)} for t in wanted]
        }
        reply, problem = await self._forward("list_reassignments", params)
        if reply is None:
            return self._unanswered(request, problem, topics=[])
        by_topic: dict[str, list[Any]] = {}
        for ongoing in reply["reassignments"]:
            by_topic.setdefault(ongoing["topic"], []).append(
                partition_class(
                    partition_index=ongoing["partition"],
                    replicas=ongoing["replicas"],
                    adding_replicas=ongoing["adding_replicas"],
                    removing_replicas=ongoing["removing_replicas"],
                )
            )
        topics = [topic_class(name=name, partitions=partitions) for name, partitions in by_topic.items()]
        return wire.response(
            request, throttle_time_ms=0, error_code=wire.NONE, error_message=None, topics=topics
        )

    async def elect_leaders(self, request: wire.Request) -> Any:
        result_class = wire.nested(request.api.response, "ReplicaElectionResult")
        partition_class = wire.nested(result_class, "PartitionResult")
        election_type = request.body.election_type if request.version >= 1 else 0
        wanted = request.body.topic_partitions
        partitions = None if wanted is None else [[t.topic, p] for t in wanted for p in t.partitions]
        reply, problem = await self._forward(
            "elect_leaders", {"type": int(election_type), "partitions": partitions}
        )
        top_error = wire.NONE
        if reply is None or "error" in reply:
            why = problem if reply is None else str(reply["error"])
            code = wire.REQUEST_TIMED_OUT if reply is None else wire.INVALID_REQUEST
            if request.version >= 1:
                return wire.response(
                    request, throttle_time_ms=0, error_code=code, replica_election_results=[]
                )
            top_error, results = code, [[t, p, code, why] for t, p in partitions or []]
        else:
            results = reply["results"]
        by_topic: dict[str, list[Any]] = {}
        for topic, index, error, message in results:
            by_topic.setdefault(topic, []).append(
                partition_class(partition_id=index, error_code=error, error_message=message)
            )
        fields: dict[str, Any] = {"throttle_time_ms": 0}
        if request.version >= 1:
            fields["error_code"] = top_error
        return wire.response(
            request,
            **fields,
            replica_election_results=[
                result_class(topic=topic, partition_result=entries) for topic, entries in by_topic.items()
            ],
        )
