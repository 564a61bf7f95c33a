"""`python -m lingbot_map_ros.ros.params` (the table as config/lingbot_map.yaml), `--node-params`
(ros/params/node_params.py) or `--param-docs` (ros/params/docs.py): the generated files."""

import sys

from .declare import node_params_source, param_docs_source, params_yaml

if "--node-params" in sys.argv[1:]:
    print(node_params_source(), end="")
else:
    print(param_docs_source() if "--param-docs" in sys.argv[1:] else params_yaml(), end="")
