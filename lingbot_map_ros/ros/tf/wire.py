"""tf2_msgs/TFMessage from its serialized bytes, without building rosidl Python messages.

rclpy's conversion of one TFMessage (one transform) into Python objects costs ~160 µs on this 2-core CPU
(nine nested message objects, each field checked by a property setter); at a robot's 300 TF messages a second
that alone is half a core of GIL time. The listener therefore takes the messages serialized (`raw=True`) and
reads the few fields it needs here with `struct` (~5 µs a transform).

Wire format (OMG CDR, XCDR1, as rmw_fastrtps and rmw_cyclonedds send ROS messages): a 4-byte encapsulation
header (`00 01` little endian, `00 00` big endian, then 2 option bytes), then the body, aligned relative to
its start: `uint32` count of the `transforms` sequence; per `TransformStamped`: `int32 sec`, `uint32 nanosec`,
`string frame_id`, `string child_frame_id` (each `uint32` length including the NUL, the bytes, the NUL; 4-byte
aligned), then seven `float64` (8-byte aligned): translation x y z, rotation x y z w. Any other encapsulation
(XCDR2) is handed to rclpy's deserializer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["ColdSample", "TfSample", "WireError", "byte_order", "cold_sample", "parse_tf_message"]

_ENDIAN = {b"\x00\x01": "<", b"\x00\x00": ">", b"\x00\x03": "<", b"\x00\x02": ">"}  # CDR / PL_CDR, LE / BE
_HEADER = 4


class WireError(ValueError):
    """The bytes are not a TFMessage (truncated, or a length that runs past the end)."""


@dataclass(slots=True)
class TfSample:
    """One `parent -> child` transform as received: stamp in seconds, translation (x, y, z) in metres,
    rotation (x, y, z, w) as sent (not yet checked or normalised)."""

    parent: str
    child: str
    stamp_s: float
    translation: tuple[float, float, float]
    rotation: tuple[float, float, float, float]

    @property
    def edge(self) -> str:
        return f"{self.parent} -> {self.child}"


def byte_order(data: bytes) -> str | None:
    """'<' / '>' of a CDR message (XCDR1), None for any other encapsulation."""
    return _ENDIAN.get(bytes(data[:2]))


#: A transform of a frame nobody needs, kept unread: (its bytes, their offset in the message body modulo 8,
#: byte order) by child id (bytes, without a leading `/`); `cold_sample` reads it when the frame is needed.
ColdSample = tuple[bytes, int, str]


def parse_tf_message(
    data: bytes,
    hot: set[bytes] | None = None,
    cold: dict[bytes, ColdSample] | None = None,
    hot_until: int = 0,
    records: list[tuple[bytes, int, int]] | None = None,
) -> list[TfSample]:
    """The transforms of a serialized TFMessage (frame ids with a leading `/` stripped, as tf2 does).

    `hot` / `cold` (issue 30: a message of 10,000 joints costs what the node needs of it): a transform whose
    child id is in `hot` is read into a `TfSample`; a new child id joins `hot` while it holds fewer than
    `hot_until`; any other transform is not read: its raw fields replace the child's entry in `cold` (a dict
    write; no decoding, no floats). Without `hot` every transform is read. `records` (with `hot`): gets
    (child id, start, end) of every transform in the body (layout.py).

    Raises:
        WireError: malformed or truncated bytes.
    """
    order = _ENDIAN.get(bytes(data[:2]))
    if order is None:
        return _parse_with_rclpy(data)
    try:
        return _parse_cdr(memoryview(data), order, hot, cold, hot_until, records=records)
    except (struct.error, UnicodeDecodeError, IndexError) as exc:
        raise WireError(f"malformed TFMessage ({len(data)} bytes): {exc}") from exc


#: Per byte order: the sequence count; stamp + the first string's length; a string length; the 7 doubles.
_STRUCTS = {
    o: (struct.Struct(o + "I"), struct.Struct(o + "iII"), struct.Struct(o + "I"), struct.Struct(o + "7d"))
    for o in "<>"
}


def cold_sample(cold: ColdSample) -> TfSample:
    """The `TfSample` of a transform kept unread by `parse_tf_message`."""
    record, offset, order = cold
    body = bytes(8 + offset) + record  # a one-transform body, the record at its original alignment
    (sample,) = _parse_cdr(memoryview(body), order, None, None, 0, first=8 + offset)
    return sample


def _parse_cdr(
    buf: memoryview,
    order: str,
    hot: set[bytes] | None,
    cold: dict[bytes, ColdSample] | None,
    hot_until: int,
    first: int = 0,
    records: list[tuple[bytes, int, int]] | None = None,
) -> list[TfSample]:
    """`first` > 0: `buf` is a body holding one transform at `first` (`cold_sample`), no header or count."""
    count_s, head_s, len_s, seven = _STRUCTS[order]
    body = buf[_HEADER:] if not first else buf  # alignment is relative to the body
    end = len(body)
    (count,) = count_s.unpack_from(body, 0) if not first else (1,)
    if count * 72 > end:  # each transform needs at least 72 bytes: a bogus count must not allocate
        raise WireError(f"TFMessage claims {count} transforms in {end + _HEADER} bytes")
    out: list[TfSample] = []
    pos = first or 4
    for _ in range(count):
        pos += -pos % 4
        start = pos
        sec, nanosec, length = head_s.unpack_from(body, pos)
        pos += 12
        if length < 1 or pos + length > end:
            raise WireError(f"frame_id of {length} bytes runs past the end ({end + _HEADER} bytes)")
        parent_at, parent_end = pos, pos + length - 1
        pos += length
        pos += -pos % 4
        (length,) = len_s.unpack_from(body, pos)
        pos += 4
        if length < 1 or pos + length > end:
            raise WireError(f"child_frame_id of {length} bytes runs past the end ({end + _HEADER} bytes)")
        child_at, pos = pos, pos + length
        pos += -pos % 8
        if hot is not None:
            key = bytes(body[child_at : child_at + length - 1]).lstrip(b"/")
            if records is not None:
                records.append((key, start, pos + 56))
            if key not in hot and len(hot) < hot_until:
                hot.add(key)
            elif key not in hot:
                pos += 56
                if pos > end:
                    raise WireError(f"transform runs past the end ({end + _HEADER} bytes)")
                cold[key] = (bytes(body[start:pos]), start % 8, order)
                continue
        parent = str(body[parent_at:parent_end], "utf-8")
        child = str(body[child_at : child_at + length - 1], "utf-8")
        tx, ty, tz, qx, qy, qz, qw = seven.unpack_from(body, pos)
        pos += 56
        if parent[:1] == "/" or child[:1] == "/":
            parent, child = parent.lstrip("/"), child.lstrip("/")
        out.append(TfSample(parent, child, sec + 1e-9 * nanosec, (tx, ty, tz), (qx, qy, qz, qw)))
    return out


def _parse_with_rclpy(data: bytes) -> list[TfSample]:
    """Any other encapsulation: rclpy's deserializer (slow, but no robot sends it by default)."""
    from rclpy.serialization import deserialize_message
    from tf2_msgs.msg import TFMessage

    try:
        msg = deserialize_message(data, TFMessage)
    except Exception as exc:  # noqa: BLE001 - whatever the deserializer raises, the bytes are bad
        raise WireError(f"undecodable TFMessage ({len(data)} bytes): {exc}") from exc
    out = []
    for tf in msg.transforms:
        t, q, s = tf.transform.translation, tf.transform.rotation, tf.header.stamp
        out.append(
            TfSample(
                tf.header.frame_id.lstrip("/"),
                tf.child_frame_id.lstrip("/"),
                s.sec + 1e-9 * s.nanosec,
                (t.x, t.y, t.z),
                (q.x, q.y, q.z, q.w),
            )
        )
    return out
