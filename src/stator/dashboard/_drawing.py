"""The dashboard's graph drawing, which lives in :mod:`stator._drawing` (the Django admin
draws with it too, without the dashboard extra)."""

from .._drawing import NODE_H, NODE_W, Placed, edge_key, layout, node_key, role, to_svg

__all__ = ["NODE_H", "NODE_W", "Placed", "edge_key", "layout", "node_key", "role", "to_svg"]
