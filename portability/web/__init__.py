"""The web platform's machinery: a loopback HTTP server, headless Chromium, and the page harness.

Chromium is driven over the DevTools protocol by a standard-library client (``cdp.py``); nothing here
imports a heavy package.
"""
