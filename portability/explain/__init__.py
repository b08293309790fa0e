"""Explaining a failure: ``localize`` (the first node whose output diverges, by graph ``cuts``, and a
reproducer ``export``ed as its own model) and ``fix`` (the documented alternatives of a failing target,
retried through the same cache and workers). Built over the check (``portability.engine``)."""
