"""Bundles of web targets to run in a person's own browser (``bundle/web.py``), and the results brought back
(``bundle/ingest.py``)."""
