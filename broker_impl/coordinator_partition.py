"""What a coordinator holds for one ``__consumer_offsets`` partition it leads.

The groups whose id hashes to the partition (:class:`~broker_impl.group_state.Group`) and their
committed offsets.  It is built by replaying the partition's log from its start -- the same
records followers replicate, so any replica that becomes leader rebuilds the same state -- and
then kept current by the coordinator's own acknowledged writes.

Replay is **to the log end, not to the HW** (as Kafka's loader does).  It has to be: a
follower learns the HW one fetch after the leader, so a freshly elected leader's HW usually
lags its log end, and the commits the old coordinator acknowledged last sit in between --
replayed only to the HW, the new coordinator would serve older offsets than it acknowledged.
And it is safe: a leader never truncates its own log, so every record it holds becomes
committed unless this replica loses leadership, and then this whole object is thrown away.
The consequence, also Kafka's: a commit whose OffsetCommit timed out (the client was told it
failed, or never heard back) can appear after a failover, because its record reached the new
leader -- an "unknown" outcome, never a lost acknowledged commit.

An offset entry is replaced only by a record later in the log (``record_offset``), so the order
in which concurrent commits complete cannot make an older commit win.

Transactional commits (TxnOffsetCommit, :mod:`broker_impl.txn_offsets`) are records of a
transactional batch: they stay *pending* under their producer id until the transaction's marker
reaches this partition -- COMMIT applies them (each at its own record offset), ABORT drops them --
both live and on replay, so a new coordinator sees exactly what the old one did.
"""

from __future__ import annotations

import dataclasses

from .control_records import MarkerFormatError, read_marker
from .group_members import Effect
from .group_records import CommittedOffset, GroupRecord, OffsetKey, decode
from .group_state import Group, GroupSettings
from .records import BatchHeader


@dataclasses.dataclass(frozen=True)
class Committed:
    value: CommittedOffset
    record_offset: int
    """Offset of the record in ``__consumer_offsets`` that stored ``value``."""


class CoordinatorPartition:
    """The coordinator's state for partition ``index``, valid for one leader epoch."""

    def __init__(self, index: int, leader_epoch: int, settings: GroupSettings) -> None:
        self.index = index
        self.leader_epoch = leader_epoch
        self.settings = settings
        self.loaded = False
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[tuple[str, int], Committed]] = {}
        self._replayed_groups: dict[str, GroupRecord | None] = {}
        self.replayed_records = 0
        self.pending_transactions: dict[int, list[tuple[OffsetKey, CommittedOffset | None, int]]] = {}
        """Producer id -> its open transaction's offset commits (key, value, record offset)."""

    # ---- loading ------------------------------------------------------------------------------

    def replay(
        self, record_offset: int, key: bytes | None, value: bytes | None, producer_id: int = -1
    ) -> None:
        """Apply one record of the log, in log order (``producer_id``: of a transactional batch,
        else -1).  Raises ``RecordFormatError`` on a record this broker cannot read (the caller
        decides whether to skip it)."""
        decoded_key, decoded_value = decode(key, value)
        self.replayed_records += 1
        if isinstance(decoded_key, OffsetKey):
            assert decoded_value is None or isinstance(decoded_value, CommittedOffset)
            if producer_id >= 0:
                self.add_pending(producer_id, decoded_key, decoded_value, record_offset)
            else:
                self.apply_offset(decoded_key, decoded_value, record_offset)
        else:
            assert decoded_value is None or isinstance(decoded_value, GroupRecord)
            self._replayed_groups[decoded_key.group] = decoded_value

    def finish_load(self, now: float) -> None:
        """Turn the last group record of each group into a live group (its members' sessions
        start at ``now``), and a group known only by its offsets into an Empty one; the
        partition then serves requests."""
        for group_id, record in self._replayed_groups.items():
            if record is not None:
                self.groups[group_id] = Group.from_record(group_id, record, self.settings, now)
        for group_id, entries in self.offsets.items():
            if entries and group_id not in self.groups:
                self.groups[group_id] = Group(group_id, self.settings)
        self._replayed_groups.clear()
        self.loaded = True

    # ---- offsets ------------------------------------------------------------------------------

    def apply_offset(self, key: OffsetKey, value: CommittedOffset | None, record_offset: int) -> None:
        """Record a commit (``None``: a tombstone) stored at ``record_offset``, unless a later
        record already set this partition's offset."""
        entries = self.offsets.setdefault(key.group, {})
        position = (key.topic, key.partition)
        current = entries.get(position)
        if current is not None and current.record_offset >= record_offset:
            return
        if value is None:
            entries.pop(position, None)
        else:
            entries[position] = Committed(value, record_offset)

    def add_pending(
        self, producer_id: int, key: OffsetKey, value: CommittedOffset | None, record_offset: int
    ) -> None:
        """A transactional commit stored at ``record_offset``: it waits for its marker."""
        self.pending_transactions.setdefault(producer_id, []).append((key, value, record_offset))

    def complete_transaction(self, producer_id: int, committed: bool) -> None:
        """The marker of ``producer_id``'s transaction: apply its commits, or drop them."""
        for key, value, record_offset in self.pending_transactions.pop(producer_id, []):
            if committed:
                self.apply_offset(key, value, record_offset)

    def replay_marker(self, header: BatchHeader, batch: bytes) -> None:
        """A marker met while loading (one this broker cannot read is ignored)."""
        try:
            marker = read_marker(header, batch)
        except MarkerFormatError:
            return
        self.complete_transaction(marker.producer_id, marker.committed)

    def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        return {position: entry.value for position, entry in self.offsets.get(group_id, {}).items()}

    # ---- groups -------------------------------------------------------------------------------

    def group(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def group_or_new(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, self.settings)
        return group

    def group_ids(self) -> list[str]:
        return sorted(self.groups)

    def shut_down(self, error: int) -> list[Effect]:
        """Give every group up: the replies to their waiting requests carry ``error``."""
        effects: list[Effect] = []
        for group in self.groups.values():
            group.shut_down(error)
            effects.extend(group.take_effects())
        return effects
