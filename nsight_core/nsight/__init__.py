"""The Nsight-Python-style `@kernel` API: the decorator's machinery and its function jobs (``nsight_core.analyze`` is the public face)."""
