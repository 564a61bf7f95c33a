"""The mapping half of the engine: posed frames in, poses in the map frame, a map, a grid and files out.

`mapper.py` `Mapper` (the frame chain, scale, poses, twist, trajectory: `locate`; the frame's points:
`integrate`), `map_side.py` `MapSide` (the map side's one owner and lock), `voxel_map.py`, `grid.py`,
`trajectory.py`, `frames.py` (the one frame chain), `scale.py`, `fusion.py` (several cameras' maps),
`tf_tree.py` (the one-parent rule of the TF tree), `writers.py` (PLY / TUM files), `mapper_config.py`.
"""
