"""lazyfs: a FUSE filesystem that makes power loss observable (the LazyFS idea).

``python -m nemesis.lazyfs mount BACKING_DIR MOUNTPOINT`` serves BACKING_DIR at MOUNTPOINT. Changes stay
in this process's memory until they are made durable; a control command then discards what was not
(power loss) or keeps a seeded part of it (torn writes). Runs with the standard library plus mfusepy
(Debian ``fuse3`` for libfuse3 and fusermount3), so it can run inside a broker container.

Durability model
================

It follows what ext4 with ``data=ordered`` (its default) guarantees, minus the ``auto_da_alloc``
heuristics, so an application gets exactly what POSIX plus an ordered metadata journal promise:

1. **File data and file size** (``write``, ``truncate``/``ftruncate``, ``open(O_TRUNC)``) become
   durable only by ``fsync``/``fdatasync`` of *that file* (any descriptor of it), or by the ``sync``
   command. Another file's fsync does not persist them (delayed allocation: ext4 writes a file's dirty
   pages at its own writeback, not at a journal commit). ``close`` persists nothing. A truncate counts
   as data here; ext4 journals a shrinking truncate, so a later unrelated commit may persist it there:
   this model takes the stricter reading (the old bytes can come back), which recovery must tolerate.
2. **Namespace and attribute changes** (create, ``mkdir``, ``symlink``, ``unlink``, ``rmdir``,
   ``rename``, ``chmod``, ``chown``) go to an ordered metadata journal. The whole journal is committed,
   in order, by an fsync of a directory *or of any file*: a jbd2 commit carries every metadata change
   made before it, whichever inode the fsync was for. So ``create; write; fsync(file)`` makes the file
   and its data durable; ``rename`` needs an fsync of either directory (or any later fsync).
3. A **power loss** (``drop``) discards the uncommitted journal and all unsynced data: a file created
   and never fsynced vanishes, an unlinked or renamed file is back under its old name, an overwrite or
   truncate is undone. A file whose creation was committed but whose data was not is empty (as after a
   real crash with delayed allocation). ``rename`` over an existing file without fsyncing the new
   content first loses that content (no ``auto_da_alloc``; XFS behaves the same).
4. A **torn** power loss (``torn SEED``) commits a seeded random prefix of the journal and, for each
   dirty file, persists a seeded random prefix of its pending writes and truncates in the order they
   were made, possibly only the first bytes of the next write; the rest is discarded. Real writeback
   is page-granular and unordered within a file; a prefix is the shape that append-only logs with
   checksums are built to detect (a torn tail).
5. **Timestamps** are not part of the model: the view keeps what programs set or caused, and after a
   power loss or remount every node shows its backing file's times (those of its last writeback).
6. If the **filesystem process dies** (SIGKILL), that is a power loss too: nothing unsynced was ever
   written to BACKING_DIR. The dead mount answers ``ENOTCONN`` until ``unmount``; mounting again serves
   the durable state. A clean unmount (``unmount`` while alive, SIGTERM, SIGINT) persists everything,
   as ``umount`` does.
7. After ``drop``/``torn`` the filesystem keeps serving the durable state. Descriptors opened before
   the loss fail with ``EIO``: kill (and reap) every process using the mount *before* the loss, or
   its in-flight writes may land after it.

8. **Disk faults** (``fail OP ERRNO GLOB``, ``slow-fsync MS GLOB``, ``clear``; see ``faults``): a
   write, fsync or read of matching files fails with EIO, ENOSPC or EROFS, or an fsync is slow. A failed
   fsync loses the file's unsynced changes for good, as Linux does since 4.13 ("fsyncgate"): the
   view still shows them, no later fsync or sync persists them, a power loss discards them.

Not modelled: hard links (EPERM), device/FIFO/socket nodes (EPERM), extended attributes, and changes
made to BACKING_DIR behind the filesystem's back while it is mounted.

Power loss of a broker, in order: SIGKILL the broker and wait until it is reaped; ``control MOUNTPOINT
drop`` (or ``torn SEED``); restart the broker on the same mount. Modules: `protocol` (control
commands), `control` (client: commands, waiting, unmounting), `model` (the semantics), `rules` and
`faults` (disk faults: the rules, and the model that obeys them), `nodes`,
`extents` and `journal` (its data structures), `fuse_adapter` (the mfusepy side), ``__main__`` (CLI).
"""
