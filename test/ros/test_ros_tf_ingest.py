"""TF ingestion pieces without DDS (issue 19): the TFMessage wire reader against rclpy's serializer, the
sample checks (finite, unit quaternion, far future), per-edge rejection counts with one WARN an edge, the
buffer's O(1) store of received samples, and the one callback guard of subscriptions, timers and services."""

from __future__ import annotations

import math

import numpy as np
import pytest
from geometry_msgs.msg import TransformStamped
from rclpy.serialization import serialize_message
from std_srvs.srv import Trigger
from tf2_msgs.msg import TFMessage

from lingbot_map_ros.engine.geometry import pose_from_quat
from lingbot_map_ros.ros.lifecycle.entities import guard_callback, service_failure
from lingbot_map_ros.ros.tf.buffer import TfBuffer, TransformUnavailable
from lingbot_map_ros.ros.tf.ingest import TOP_REJECTED_EDGES, SampleCheck, check_sample
from lingbot_map_ros.ros.tf.wire import TfSample, WireError, parse_tf_message


def transform(
    parent: str, child: str, sec: int, nanosec: int, t: list[float], q: list[float]
) -> TransformStamped:
    msg = TransformStamped(child_frame_id=child)
    msg.header.frame_id, msg.header.stamp.sec, msg.header.stamp.nanosec = parent, sec, nanosec
    tr, rot = msg.transform.translation, msg.transform.rotation
    tr.x, tr.y, tr.z = t
    rot.x, rot.y, rot.z, rot.w = q
    return msg


def test_the_wire_reader_equals_rclpys_deserializer_for_every_alignment() -> None:
    rng = np.random.default_rng(7)
    for n in range(6):
        sent = [
            transform(
                "/" * (i % 2) + "p" * (1 + (i * 3 + n) % 9),
                "c" * (1 + (i + n) % 7),
                int(rng.integers(-5, 2**31 - 1)),
                int(rng.integers(0, 10**9)),
                list(rng.normal(size=3)),
                [math.nan, -0.0, math.inf, 1.0],
            )
            for i in range(n)
        ]
        got = parse_tf_message(serialize_message(TFMessage(transforms=sent)))
        assert len(got) == n
        for msg, sample in zip(sent, got, strict=True):
            s, t, q = msg.header.stamp, msg.transform.translation, msg.transform.rotation
            assert sample.parent == msg.header.frame_id.lstrip("/") and sample.child == msg.child_frame_id
            assert sample.stamp_s == s.sec + 1e-9 * s.nanosec
            assert sample.translation == (t.x, t.y, t.z)
            np.testing.assert_array_equal(sample.rotation, (q.x, q.y, q.z, q.w))  # NaN == NaN here


def test_truncated_or_bogus_bytes_raise_wire_error() -> None:
    data = serialize_message(TFMessage(transforms=[transform("odom", "base", 1, 2, [1, 2, 3], [0, 0, 0, 1])]))
    for cut in (6, 20, len(data) - 1):
        with pytest.raises(WireError):
            parse_tf_message(data[:cut])
    with pytest.raises(WireError):  # a count of 2^32 - 1 transforms in a few bytes must not allocate
        parse_tf_message(data[:4] + b"\xff\xff\xff\xff" + data[8:])


def sample(
    q: tuple = (0.0, 0.0, 0.0, 1.0),
    t: tuple = (1.0, 2.0, 3.0),
    stamp: float = 100.0,
    parent: str = "odom",
    child: str = "base_link",
) -> TfSample:
    return TfSample(parent, child, stamp, t, q)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (sample(q=(0.0, 0.0, 0.0, 0.0)), "quaternion norm 0"),
        (sample(q=(0.0, 0.0, 0.0, 1.01)), "quaternion norm 1.01"),
        (sample(q=(math.nan, 0.0, 0.0, 1.0)), "non-finite rotation"),
        (sample(q=(math.inf, 0.0, 0.0, 1.0)), "non-finite rotation"),
        (sample(t=(0.0, math.nan, 0.0)), "non-finite translation"),
        (sample(stamp=100.0 + 5.001), "in the future"),
        (sample(parent=""), "empty frame id"),
        (sample(parent="base_link"), "same frame"),
    ],
)
def test_bad_samples_are_rejected_with_the_reason(bad: TfSample, reason: str) -> None:
    assert reason in (check_sample(bad, static=False, now_s=100.0, max_future_s=5.0) or "")


def test_a_near_unit_quaternion_is_normalised_and_statics_and_sim_time_skip_the_future_check() -> None:
    near = sample(q=(0.0, 0.0, 0.0, 1.0009))
    assert check_sample(near, static=False, now_s=100.0, max_future_s=5.0) is None
    assert near.rotation == (0.0, 0.0, 0.0, 1.0)
    assert check_sample(sample(stamp=1e9), static=True, now_s=100.0, max_future_s=5.0) is None  # valid always
    assert (
        check_sample(sample(stamp=1e9), static=False, now_s=None, max_future_s=5.0) is None
    )  # no /clock yet
    assert check_sample(sample(stamp=104.9), static=False, now_s=100.0, max_future_s=5.0) is None


def test_rejections_are_counted_per_edge_with_one_warning_an_edge() -> None:
    warnings: list[str] = []
    check = SampleCheck(warnings.append)
    for _ in range(3):
        assert not check(sample(q=(0.0, 0.0, 0.0, 0.0), child="wheel"), False, 100.0, 5.0)
    assert not check(sample(stamp=1e5 + 100.0), False, 100.0, 5.0)
    assert check(sample(), False, 100.0, 5.0)
    assert check.stats() == {
        "tf.samples": 1,
        "tf.rejected_total": 4,
        "tf.malformed": 0,
        "tf.rejected_edges": 2,
        "tf.rejected_other": 0,
        "tf.rejected.odom -> base_link": 1,
        "tf.rejected.odom -> wheel": 3,
    }
    assert len(warnings) == 2 and "odom -> wheel" in warnings[0] and "in the future" in warnings[1]


def test_20000_nan_edges_give_a_bounded_table_and_a_bounded_number_of_warnings() -> None:
    """Issue 30: 20,000 NaN edges gave 20,001 /diagnostics keys (+26 MB) and 20,000 WARN lines."""
    warnings: list[str] = []
    check = SampleCheck(warnings.append)
    for i in range(20_000):
        assert not check(sample(t=(math.nan, 0.0, 0.0), child=f"sensor_{i}"), False, 100.0, 5.0)
    for _ in range(5):  # the edge with the most rejections is listed
        assert not check(sample(t=(math.nan, 0.0, 0.0), child="sensor_7"), False, 100.0, 5.0)
    stats = check.stats()
    per_edge = [key for key in stats if key.startswith("tf.rejected.")]
    assert len(per_edge) == TOP_REJECTED_EDGES and stats["tf.rejected.odom -> sensor_7"] == 6
    assert stats["tf.rejected_total"] == 20_005 and len(stats) == TOP_REJECTED_EDGES + 5
    assert stats["tf.rejected_other"] == 20_005 - sum(stats[key] for key in per_edge)
    assert len(check.rejected) <= 1000 and check.untracked == 20_000 - len(check.rejected)
    assert len(warnings) == 21 and "not logged" in warnings[-1], warnings[-3:]


def test_received_samples_interpolate_like_matrices_and_old_ones_are_trimmed() -> None:
    by_sample, by_matrix = TfBuffer(cache_s=1.0), TfBuffer(cache_s=1.0)
    for i in range(400):
        yaw = 0.01 * i
        q = (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))
        s = sample(q=q, t=(0.01 * i, 0.0, 0.0), stamp=0.01 * i)
        by_sample.add_sample(s, static=False)
        by_matrix.set_transform(
            "odom", "base_link", s.stamp_s, pose_from_quat(s.translation, q), static=False
        )
    for t in (3.0, 3.505, 3.99):
        np.testing.assert_allclose(
            by_sample.lookup("odom", "base_link", t), by_matrix.lookup("odom", "base_link", t), atol=1e-12
        )
    assert len(by_sample._edges["base_link"].stamps) <= 2 * 100 + 1  # trimmed in batches: at most 2 x cache
    with pytest.raises(TransformUnavailable, match="older than the buffer"):
        by_sample.lookup("odom", "base_link", 2.5)  # beyond cache_s, even if not trimmed yet


def test_the_guard_counts_and_swallows_what_a_callback_raises() -> None:
    failures: list[tuple[str, str]] = []

    def on_error(where: str, exc: Exception) -> None:
        failures.append((where, type(exc).__name__))

    def boom(*args: object) -> None:
        raise ValueError("expected non-zero quaternions")

    assert guard_callback("subscription_tf", boom, on_error)(object()) is None
    response = guard_callback("service_reset", boom, on_error, service_failure())(
        Trigger.Request(), Trigger.Response(success=True)
    )
    assert isinstance(response, Trigger.Response) and not response.success
    assert response.message == "ValueError: expected non-zero quaternions"
    named = guard_callback("service_reset", boom, on_error, service_failure("reset"))
    assert (
        named(Trigger.Request(), Trigger.Response()).message
        == "reset failed: ValueError: expected non-zero quaternions"
    )
    assert guard_callback("timer", lambda: 3, on_error)() == 3
    assert failures == [("subscription_tf", "ValueError"), ("service_reset", "ValueError")] + [
        ("service_reset", "ValueError")
    ]


def test_checked_samples_in_tf2s_cpp_core_interpolate_like_the_package_buffer() -> None:
    """With the real tf2 (a ROS install; skipped without): what `_Tf2Store` hands to tf2's C++ `BufferCore`
    looks up as the package's buffer does; a far-future sample, which the checks keep out, blinds it."""
    tf2_ros = pytest.importorskip("tf2_ros")
    from rclpy.duration import Duration
    from rclpy.time import Time as RclTime

    from lingbot_map_ros.engine.mapping.tf_graph import TfGraph
    from lingbot_map_ros.ros.tf.listener import _Tf2Store, transform_to_matrix

    core, ours = tf2_ros.Buffer(cache_time=Duration(seconds=10.0)), TfBuffer()
    store = _Tf2Store(core, TfGraph())
    mount = sample(q=(-0.5, 0.5, -0.5, 0.5), parent="base_link", child="camera", stamp=0.0)
    for s, static in [(mount, True)] + [
        (
            sample(
                q=(0.0, 0.0, math.sin(0.05 * i), math.cos(0.05 * i)),
                t=(0.1 * i, 0.0, 0.0),
                stamp=10.0 + 0.1 * i,
            ),
            False,
        )
        for i in range(20)
    ]:
        assert check_sample(s, static, now_s=12.0, max_future_s=5.0) is None
        store(s, static)
        ours.add_sample(s, static)
    for t in (10.0, 10.55, 11.9):
        got = transform_to_matrix(
            core.lookup_transform_core("odom", "camera", RclTime(nanoseconds=round(t * 1e9))).transform
        )
        np.testing.assert_allclose(got, ours.lookup("odom", "camera", t), atol=1e-9)
    future = sample(stamp=11.0 + 1e5)  # what the checks keep out would blind tf2: it prunes what is older
    assert "in the future" in check_sample(future, False, now_s=12.0, max_future_s=5.0)
    store(future, False)
    store(sample(stamp=12.0), False)  # a good sample after it is refused as too old ("TF_OLD_DATA")
    with pytest.raises(tf2_ros.ExtrapolationException):
        core.lookup_transform_core("odom", "camera", RclTime(nanoseconds=round(11.9e9)))
