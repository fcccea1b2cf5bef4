"""pisessfs: Pi coding-agent sessions as a FUSE filesystem.

Layering (imports point down; ``tests/test_layers.py`` keeps it so):
``cli`` -> ``mount`` -> ``fuse_ops`` -> ``view`` -> ``summary`` -> ``sessions`` ->
``render``, ``tree``, ``jsonl`` -> ``model``. Nothing below ``fuse_ops`` imports pyfuse3
or trio.
"""

__version__ = "0.1.0"
