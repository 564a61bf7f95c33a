"""Host-side bookkeeping of the cache pool: which frame lives where, and the plan of one step.

The pool of one layer is a flat token array (K and V alike), laid out so that the visible keys of every step
are ONE contiguous token range (attention is non-causal over a set, so key order does not matter)::

    [ special stream: E x num_special | frame slots: (scale_frames + pool_window + 1) x tokens_per_frame ]
              occupied = the top n_e entries     committed frames = slots [0, n_a + n_w)

* Frame slots ``0 .. scale_frames-1`` hold the anchors (never evicted), the following slots the live window
  (kept compact: a keyframe that evicts writes into the evicted frame's slot), and the slot right after the
  committed frames is the scratch slot of a non-keyframe (nothing is written into committed memory, so the
  roll back is exact by construction).
* The special stream holds the special tokens of frames evicted from the window. Entries fill downwards from
  the top, so the occupied ones always end where the frame slots begin; removing the oldest entry moves the
  lowest entry into its place (order is irrelevant for attention).

Everything here is plain Python over small lists; a step's plan (:class:`StepPlan`) is computed once and
reused by every layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from lingbot_map_ros.cache.config import KVCacheConfig


@dataclass(frozen=True)
class TokenCopy:
    """Copy ``length`` tokens from pool token ``src`` to pool token ``dst`` (same layer, K and V)."""

    src: int
    dst: int
    length: int


@dataclass(frozen=True)
class StepPlan:
    """The visible set and memory traffic of one step, shared by all layers.

    ``copies`` run in order in every layer before the new frames' K/V are written at ``write_start``;
    ``commit_copies`` run once over all layers when the step commits (phase-1 evictions after attention).
    The visible keys are pool tokens ``[visible_start, visible_stop)``.
    """

    num_frames: int
    keyframe: bool
    write_start: int
    visible_start: int
    visible_stop: int
    copies: tuple[TokenCopy, ...]
    commit_copies: tuple[TokenCopy, ...]

    @property
    def visible_tokens(self) -> int:
        return self.visible_stop - self.visible_start


@dataclass
class LayoutState:
    """Where every committed frame lives. Frame ids are the frames' temporal indices since the last reset."""

    slot_frame: list[int] = field(default_factory=list)  # frame id per committed slot, slots [0, n_a + n_w)
    special_frame: dict[int, int] = field(default_factory=dict)  # special entry -> frame id (evicted frames)
    anchors: int = 0
    frames_stored: int = 0

    def copy(self) -> LayoutState:
        return LayoutState(list(self.slot_frame), dict(self.special_frame), self.anchors, self.frames_stored)

    @property
    def committed_frames(self) -> int:
        return len(self.slot_frame)

    @property
    def window_frames(self) -> int:
        return len(self.slot_frame) - self.anchors


class CacheLayout:
    """Plans steps over a :class:`LayoutState`; the owner applies the returned copies to the pool."""

    def __init__(self, config: KVCacheConfig) -> None:
        #: The live geometry: replaced (never mutated) when the window is resized or the pool grows, so its
        #: ``sliding_window`` and ``pool_window`` are the live values (the one place they are held).
        self.config = replace(config, pool_window=config.initial_pool_window)
        self.tokens_per_frame = config.tokens_per_frame
        # Most evicted frames whose specials can be kept: cap minus full anchors minus one window frame.
        self.special_entries = (
            config.max_special_frames - config.scale_frames - 1 if config.num_special > 0 else 0
        )
        self.frame_base = self.special_entries * config.num_special
        self.state = LayoutState()

    @property
    def num_slots(self) -> int:
        """Frame slots of the pool: anchors, the pool's window (``config.pool_window``: grows on a live
        increase past it) and one scratch slot."""
        return self.config.scale_frames + self.config.initial_pool_window + 1

    @property
    def pool_tokens(self) -> int:
        """Tokens of one layer's pool: the special stream, then ``num_slots`` frame slots."""
        return self.frame_base + self.num_slots * self.tokens_per_frame

    def grow(self, pool_window: int) -> None:
        """Frame slots for a window of ``pool_window`` frames; existing tokens keep their addresses."""
        if pool_window > self.config.initial_pool_window:
            self.config = replace(self.config, pool_window=pool_window)

    # ----------------------------------------------------------------------------------------- addresses
    def slot_token(self, slot: int) -> int:
        """First pool token of frame slot ``slot``."""
        return self.frame_base + slot * self.tokens_per_frame

    def special_token(self, entry: int) -> int:
        """First pool token of special-stream entry ``entry``."""
        return entry * self.config.num_special

    def visible_range(self, state: LayoutState, extra_frames: int = 0) -> tuple[int, int]:
        """Committed visible tokens of ``state`` plus ``extra_frames`` frames in the slots after them."""
        start = self.frame_base - len(state.special_frame) * self.config.num_special
        stop = self.slot_token(state.committed_frames + extra_frames)
        return start, stop

    # ----------------------------------------------------------------------------------------- planning
    def plan_step(self, num_frames: int, keyframe: bool) -> tuple[StepPlan, LayoutState]:
        """Plan one step; returns the plan and the state to install if the step commits."""
        state = self.state
        if not isinstance(num_frames, int) or num_frames < 1:
            raise ValueError(f"num_frames must be an int >= 1, got {num_frames!r}")
        if state.committed_frames == 0:
            return self._plan_first(num_frames, keyframe)
        if num_frames != 1:
            raise ValueError(
                f"num_frames must be 1 once the cache holds frames (it holds {state.committed_frames}); "
                "only the anchor phase on an empty cache takes several frames"
            )
        if not keyframe:
            start, stop = self.visible_range(state, extra_frames=1)
            plan = StepPlan(1, False, self.slot_token(state.committed_frames), start, stop, (), ())
            return plan, state
        return self._plan_keyframe()

    def _plan_first(self, num_frames: int, keyframe: bool) -> tuple[StepPlan, LayoutState]:
        """Anchor phase on an empty cache: the visible set is exactly the new frames."""
        if num_frames > self.num_slots:
            raise ValueError(
                f"num_frames must be <= scale_frames + pool_window + 1 = {self.num_slots} on an empty cache, "
                f"got {num_frames}"
            )
        start, stop = self.slot_token(0), self.slot_token(num_frames)
        if not keyframe:
            return StepPlan(num_frames, False, start, start, stop, (), ()), self.state
        new = LayoutState(
            slot_frame=list(range(num_frames)),
            anchors=min(num_frames, self.config.scale_frames),
            frames_stored=num_frames,
        )
        excess = max(0, new.window_frames - self.config.sliding_window)
        commit_copies = self._evict_oldest(new, excess, fill_slots=0)[1]
        return StepPlan(num_frames, True, start, start, stop, (), tuple(commit_copies)), new

    def _plan_keyframe(self) -> tuple[StepPlan, LayoutState]:
        """One streaming keyframe: append, evict down to the window (reference order), then attend."""
        new = self.state.copy()
        frame_id = new.frames_stored
        new.frames_stored += 1
        copies: list[TokenCopy] = []
        if new.anchors < self.config.scale_frames:
            slot = new.committed_frames
            new.slot_frame.append(frame_id)
            new.anchors += 1
        elif new.window_frames < self.config.sliding_window:
            slot = new.committed_frames
            new.slot_frame.append(frame_id)
        else:
            holes, copies = self._evict_oldest(new, 1, fill_slots=1)
            slot = holes[0]
            new.slot_frame[slot] = frame_id
        copies += self._enforce_special_cap(new, [])
        start, stop = self.visible_range(new)
        return StepPlan(1, True, self.slot_token(slot), start, stop, tuple(copies), ()), new

    def resize(self, sliding_window: int, state: LayoutState) -> None:
        """Install a live resize planned by :meth:`plan_resize` (its copies applied by the owner)."""
        self.state = state
        self.config = replace(self.config, sliding_window=sliding_window)

    def plan_resize(self, sliding_window: int) -> tuple[list[TokenCopy], LayoutState]:
        """Copies and new state for a live window resize (shrinking evicts at once)."""
        new = self.state.copy()
        excess = max(0, new.window_frames - sliding_window)
        copies = self._evict_oldest(new, excess, fill_slots=0)[1] if excess else []
        return copies, new

    # ----------------------------------------------------------------------------------------- eviction
    def _evict_oldest(
        self, state: LayoutState, count: int, fill_slots: int
    ) -> tuple[list[int], list[TokenCopy]]:
        """Evict the ``count`` oldest window frames of ``state`` (in place).

        Their specials enter the special stream (subject to the cap). The first ``fill_slots`` freed slots are
        returned for the caller to fill with new frames; the remaining holes are closed by moving the last
        frames into them, so the committed slots stay ``[0, n_a + n_w)``. Returns (slots to fill, copies in
        order).
        """
        if count == 0:
            return [], []
        window = range(state.anchors, state.committed_frames)
        victims = sorted(window, key=lambda s: state.slot_frame[s])[:count]
        incoming = [(slot, state.slot_frame[slot]) for slot in victims]
        copies = self._enforce_special_cap(state, incoming, leaving=count - fill_slots)
        holes = sorted(victims)
        to_fill, to_close = holes[:fill_slots], holes[fill_slots:]
        # Close holes from the top: move the highest-numbered surviving frames down into the lowest holes.
        keep = state.committed_frames - len(to_close)
        sources = [s for s in range(keep, state.committed_frames) if s not in to_close]
        targets = [h for h in to_close if h < keep]
        tokens = self.tokens_per_frame
        for src, dst in zip(sources, targets, strict=True):
            copies.append(TokenCopy(self.slot_token(src), self.slot_token(dst), tokens))
            state.slot_frame[dst] = state.slot_frame[src]
        del state.slot_frame[keep:]
        return to_fill, copies

    def _enforce_special_cap(
        self, state: LayoutState, incoming: list[tuple[int, int]], leaving: int = 0
    ) -> list[TokenCopy]:
        """Add the specials of ``incoming`` (slot, frame id) evicted frames; drop the oldest past the cap.

        ``leaving`` = how many window frames leave ``state`` after this call (they still count in
        ``state.slot_frame`` now). ``incoming`` is oldest first; incoming frames are newer than every stored
        entry, so stored entries are dropped first.
        """
        num_special = self.config.num_special
        if num_special == 0:
            return []
        frames_after = state.committed_frames - leaving
        allowed = self.config.max_special_frames - frames_after
        entries = state.special_frame
        drop = max(0, len(entries) + len(incoming) - allowed)
        drop_stored = min(drop, len(entries))
        copies: list[TokenCopy] = []
        for _ in range(drop_stored):
            oldest = min(entries, key=entries.__getitem__)
            lowest = self.special_entries - len(entries)
            if oldest != lowest:
                copies.append(TokenCopy(self.special_token(lowest), self.special_token(oldest), num_special))
                entries[oldest] = entries[lowest]
            del entries[lowest]
        return copies + self._add_specials(state, list(incoming)[drop - drop_stored :])

    def _add_specials(self, state: LayoutState, incoming: list[tuple[int, int]]) -> list[TokenCopy]:
        copies = []
        for slot, frame_id in incoming:
            entry = self.special_entries - len(state.special_frame) - 1
            copies.append(
                TokenCopy(self.slot_token(slot), self.special_token(entry), self.config.num_special)
            )
            state.special_frame[entry] = frame_id
        return copies
