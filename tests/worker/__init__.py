"""Each part of the worker on its own (``stator._worker``), on both backends."""
