"""The stream half of the engine: RGB frames in, posed `FrameResult`s out (no map, no ROS).

`session.py` `StreamingSession` (one camera's model stream: pre-processing, anchor phase, keyframes,
re-anchors, decoding), `multi_stream.py` `MultiStreamSession` (the set of cameras over one model and one
KV pool, their streaming steps batched), and the pieces they compose: `anchors.py`, `reanchor.py`,
`model_steps.py`, `step_frames.py`, `frame_decoder.py`, `decode.py`, `preprocess.py`, `depth_schedule.py`,
`timing.py`.
"""
