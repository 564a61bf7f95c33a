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

__all__ = ["TfSample", "WireError", "parse_tf_message"]

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


def parse_tf_message(data: bytes) -> list[TfSample]:
    """The transforms of a serialized TFMessage (frame ids with a leading `/` stripped, as tf2 does).

    Raises:
        WireError: malformed or truncated bytes.
    """
    order = _ENDIAN.get(bytes(data[:2]))
    if order is None:
        return _parse_with_rclpy(data)
    try:
        return _parse_cdr(memoryview(data), order)
    except (struct.error, UnicodeDecodeError, IndexError) as exc:
        raise WireError(f"malformed TFMessage ({len(data)} bytes): {exc}") from exc


#: Per byte order: the sequence count; stamp + the first string's length; a string length; the 7 doubles.
_STRUCTS = {
    o: (struct.Struct(o + "I"), struct.Struct(o + "iII"), struct.Struct(o + "I"), struct.Struct(o + "7d"))
    for o in "<>"
}


def _parse_cdr(buf: memoryview, order: str) -> list[TfSample]:
    count_s, head_s, len_s, seven = _STRUCTS[order]
    body = buf[_HEADER:]  # alignment is relative to the body
    end = len(body)
    (count,) = count_s.unpack_from(body, 0)
    if count * 72 > end:  # each transform needs at least 72 bytes: a bogus count must not allocate
        raise WireError(f"TFMessage claims {count} transforms in {end + _HEADER} bytes")
    out: list[TfSample] = []
    pos = 4
    for _ in range(count):
        pos += -pos % 4
        sec, nanosec, length = head_s.unpack_from(body, pos)
        pos += 12
        if length < 1 or pos + length > end:
            raise WireError(f"frame_id of {length} bytes runs past the end ({end + _HEADER} bytes)")
        parent = str(body[pos : pos + length - 1], "utf-8")
        pos += length
        pos += -pos % 4
        (length,) = len_s.unpack_from(body, pos)
        pos += 4
        if length < 1 or pos + length > end:
            raise WireError(f"child_frame_id of {length} bytes runs past the end ({end + _HEADER} bytes)")
        child = str(body[pos : pos + length - 1], "utf-8")
        pos += length
        pos += -pos % 8
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
