"""One assigned Kafka partition's offsets in flight, for ``faithtrace serve --kafka`` (serve/kafka.py).

A partition's offsets are committed only past the first message not finished yet. Finished messages that no
commit confirmed by the broker covers yet (``uncommitted``) are the ones a replica killed now leaves to be
read again by the partition's next owner.

``finish`` runs on the event loop, ``commit_offset`` and ``confirm`` on the client thread.
"""

from __future__ import annotations

import asyncio
import collections


class Partition:
    """The offsets of one partition in flight, in fetch order; commits advance past finished ones only."""

    def __init__(self, key: tuple[str, int]) -> None:
        self.key = key
        self.offsets: collections.deque[int] = collections.deque()
        self.first: int | None = None  # the first offset fetched since the assignment
        self.done: set[int] = set()
        self.commit_to: int | None = None  # next offset to commit (the first not finished)
        self.committed: int | None = None
        self.finished = 0  # messages committable so far (the finished prefix), counted from the assignment
        self.acked = 0  # ... of which the broker has confirmed a commit
        self._sent: dict[int, int] = {}  # offset in a commit under way -> ``finished`` when it was sent
        self.admitted: asyncio.Future[None] | None = None  # the last message's entry into the scorer

    def add(self, offset: int) -> None:
        if self.first is None:
            self.first = offset
        self.offsets.append(offset)

    def finish(self, offset: int) -> int:
        """Mark ``offset`` finished; returns how many messages became committable (the finished prefix)."""
        self.done.add(offset)
        advanced = 0
        while self.offsets and self.offsets[0] in self.done:
            first = self.offsets.popleft()
            self.done.discard(first)
            self.commit_to = first + 1
            self.finished += 1  # after commit_to (see commit_offset)
            advanced += 1
        return advanced

    def commit_offset(self) -> int | None:
        """The offset to commit now (None: nothing new since the last confirmed commit), remembered with the
        count of finished messages it covers."""
        # The count first: finish() moves commit_to before the count, so the offset covers the count.
        count, commit_to = self.finished, self.commit_to
        if commit_to is None or commit_to == self.committed:
            return None
        self._sent[commit_to] = count
        return commit_to

    def confirm(self, offset: int) -> int:
        """The broker confirmed a commit up to ``offset``: how many more finished messages are committed."""
        self.committed = offset
        # What was finished when this commit was sent; later commits cover more, never less.
        acked = max(self.acked, self._sent.pop(offset, self.acked))
        self._sent = {o: n for o, n in self._sent.items() if o > offset}
        newly, self.acked = acked - self.acked, acked
        return newly

    def uncommitted(self) -> int:
        """Finished messages that no commit confirmed by the broker covers (also those behind one running)."""
        return self.finished - self.acked + len(self.done)
