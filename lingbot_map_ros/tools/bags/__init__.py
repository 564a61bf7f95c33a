"""tools/bags/: camera bags in and out (rosbags), made from images, video or the synthetic scene
(docs/architecture.md)."""
