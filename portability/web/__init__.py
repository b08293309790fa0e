"""The web platform's machinery: a loopback HTTP server, headless Chromium, and the page harness.

Nothing here imports playwright at module level; ``portability.runtimes.web`` drives it.
"""
