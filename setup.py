"""ament_python / pip build of lingbot_map_ros."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "lingbot_map_ros"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*", "benchmarks"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.rviz") + glob("config/*.xml")),
    ],
    install_requires=["setuptools", "numpy", "pyyaml", "gtsam==4.3.0", "evo==1.38.1"],
    extras_require={
        "gpu": ["flashinfer-python"],
        "bag": ["rosbags"],
        "fleet": ["rosbags", "ray>=2.60"],
        "export": ["pycolmap==4.2.1"],
    },
    zip_safe=True,
    maintainer="lingbot_map_ros developers",
    maintainer_email="lingbot-map-ros@example.com",
    description="ROS 2 node: LingBot-Map streaming 3D reconstruction (poses, depth, dense map) from a camera",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [
            "lingbot_map_node = lingbot_map_ros.ros.node_entry:main",
            "lingbot-map-ros = lingbot_map_ros.tools.cli:main",
        ],
    },
)
