"""Repeated big /tf messages read in proportion to what is needed (issue 30): a robot_state_publisher sends
the same tree again and again, only stamps and poses change. `TfLayouts` remembers such a message's layout
(where each transform lies, the bytes of its frame ids); a later message of the same size whose frame-id
bytes are equal (one numpy comparison, no Python per transform) is the same tree, so only its needed
transforms are read (`hot`, from their known offsets) and the rest stay in the message, kept as the layout's
newest (`newest` reads one when a frame becomes needed). Messages of fewer than `MIN_TRANSFORMS` are parsed
as they come.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from .wire import ColdSample

#: Messages with fewer transforms are parsed as they come.
MIN_TRANSFORMS = 64
#: Layouts remembered (the least recently matched goes): a robot sends a few kinds of big messages.
MAX_LAYOUTS = 4
_HEADER = 4  # the CDR encapsulation header before the body

#: One transform of a message: (child id without a leading `/`, start, end) in the body.
Record = tuple[bytes, int, int]


@dataclass
class _Layout:
    order: str
    mask: np.ndarray  # [body bytes] bool: the frame-id bytes (all but each transform's stamp and 7 doubles)
    ids: np.ndarray  # the body's bytes under `mask`
    records: list[Record]
    where: dict[bytes, tuple[int, int]]  # child -> (start, end) of its (last) transform
    data: bytes  # the newest message of this layout
    _hot_size: int = -1
    _hot: list[tuple[int, int]] = field(default_factory=list)

    def hot(self, hot: set[bytes]) -> list[tuple[int, int]]:
        """(start, end) of the transforms whose child is in `hot` (recomputed when `hot` grew)."""
        if len(hot) != self._hot_size:
            self._hot = [(start, end) for key, start, end in self.records if key in hot]
            self._hot_size = len(hot)
        return self._hot

    def cold(self, start: int, end: int) -> ColdSample:
        return self.data[_HEADER + start : _HEADER + end], start % 8, self.order


class TfLayouts:
    """The layouts of the last `MAX_LAYOUTS` big messages (module doc)."""

    def __init__(self) -> None:
        self._by_size: OrderedDict[int, _Layout] = OrderedDict()

    def match(self, data: bytes, order: str) -> _Layout | None:
        """The layout `data` repeats (then it becomes the layout's newest message), or None."""
        layout = self._by_size.get(len(data))
        if layout is None or layout.order != order:
            return None
        body = np.frombuffer(data, np.uint8, offset=_HEADER)
        if not np.array_equal(body[layout.mask], layout.ids):
            return None
        layout.data = data
        self._by_size.move_to_end(len(data))
        return layout

    def learn(self, data: bytes, order: str, records: list[Record]) -> None:
        """Remember the layout of `data` (its transforms' `records`, from `tf_wire.parse_tf_message`)."""
        if len(records) < MIN_TRANSFORMS:
            return
        body = np.frombuffer(data, np.uint8, offset=_HEADER)
        starts = np.fromiter((start for _, start, _ in records), np.int64, len(records))
        ends = np.fromiter((end for _, _, end in records), np.int64, len(records))
        mask = np.ones(len(body), bool)
        mask[(starts[:, None] + np.arange(8)).ravel()] = False  # sec, nanosec
        mask[(ends[:, None] - 56 + np.arange(56)).ravel()] = False  # translation, rotation
        where = {key: (start, end) for key, start, end in records}
        self._by_size[len(data)] = _Layout(order, mask, body[mask].copy(), records, where, data)
        self._by_size.move_to_end(len(data))
        while len(self._by_size) > MAX_LAYOUTS:
            self._by_size.popitem(last=False)

    def newest(self, key: bytes) -> list[ColdSample]:
        """The transforms of child `key` in the layouts' newest messages."""
        out = []
        for layout in self._by_size.values():
            at = layout.where.get(key)
            if at is not None:
                out.append(layout.cold(*at))
        return out
