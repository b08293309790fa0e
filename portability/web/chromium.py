"""Launching headless Debian Chromium with its DevTools port open: the flags every web target uses, a
fresh temporary profile per browser, and a stop that takes every process the browser started with it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from portability.core.shared import stop_group
from portability.web.paths import chromium_path

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-dev-shm-usage",
    # Every new browser context opens a window; without these each window also starts the omnibox's
    # WebUI pages in a renderer of their own (about 0.5 s of CPU per web target) and a spare renderer.
    "--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup,WebUIOmniboxFullPopup,PreloadTopChromeWebUI,"
    "SpareRendererForSitePerProcess",
    # WebNN's API (navigator.ml) is behind a feature: exposed, so that web/ort-webnn can find out whether
    # this build has a backend for it (Chromium reads only the last --enable-features: one list for all)
    "--enable-features=WebMachineLearningNeuralNetwork",
]
WEBGPU_ARGS = ["--enable-unsafe-webgpu", "--enable-features=Vulkan,WebMachineLearningNeuralNetwork",
               "--use-webgpu-adapter=swiftshader"]

START_TIMEOUT_S = 30.0

#: Chromium runs under this shell, whose stdin is a pipe from the process that started it. When that process
#: is gone (even SIGKILLed), the pipe's end stops the browser and every process it started (they stay in the
#: shell's process group), from a session of its own (``setsid``), which then removes the profile once
#: nothing writes there any more. The shell also ends when the browser does.
LIFELINE = """exec 3<&0 0</dev/null
"$@" 3<&- &
b=$!
(read _ <&3
 if command -v setsid >/dev/null; then
   setsid sh -c 'kill -9 -"$0"; sleep 0.3; rm -rf "$1"' $$ "$PORTABILITY_PROFILE" 3<&- &
 else
   kill -9 $b; sleep 0.3; rm -rf "$PORTABILITY_PROFILE"; kill -9 0
 fi) &
exec 3<&-
wait $b
kill -9 0
"""


def short_tmp() -> str | None:
    """The temp folder, unless its path is too long for Chromium's socket path (108 bytes): then /tmp."""
    tmp = tempfile.gettempdir()
    if len(tmp) <= 48 or not os.access("/tmp", os.W_OK):
        return tmp
    return "/tmp"


class Chromium:
    """A running headless Chromium in a fresh profile; ``endpoint`` is its DevTools HTTP address
    (``http://127.0.0.1:PORT``). ``stop()`` kills its whole process group and removes the profile."""

    def __init__(self, webgpu: bool = False, extra_args: list[str] | None = None):
        self.profile = tempfile.mkdtemp(prefix="portability-chromium-", dir=short_tmp())
        args = [chromium_path(), "--headless=new", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={self.profile}", *ARGS, *(WEBGPU_ARGS if webgpu else []), *(extra_args or []),
                "about:blank"]
        try:
            self.proc = subprocess.Popen(["/bin/sh", "-c", LIFELINE, "sh", *args], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                         env={**os.environ, "TMPDIR": self.profile,  # keeps its socket path short
                                              "PORTABILITY_PROFILE": self.profile})
        except BaseException:
            shutil.rmtree(self.profile, ignore_errors=True)
            raise
        try:
            self.endpoint = self._wait_endpoint()
        except BaseException:
            self.stop()
            raise

    def _wait_endpoint(self) -> str:
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Chromium exited at start (code {self.proc.returncode})")
            try:
                port = port_file.read_text().split()[0]
                return f"http://127.0.0.1:{int(port)}"
            except (OSError, IndexError, ValueError):
                time.sleep(0.02)
        raise RuntimeError(f"Chromium did not open its DevTools port within {START_TIMEOUT_S:g} s")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        stop_group(self.proc)  # the browser and every renderer / GPU process it started
        shutil.rmtree(self.profile, ignore_errors=True)
