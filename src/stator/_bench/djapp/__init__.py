"""A Django app holding the benchmark's model, for ``stator bench --scenario django``."""
