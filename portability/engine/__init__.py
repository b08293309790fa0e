"""The orchestration of a check: the pipeline, the worker processes that run targets, the artifact cache.

Built on the foundations in ``portability.core`` (which import nothing from here)."""
