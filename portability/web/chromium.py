"""Launching headless Debian Chromium with DevTools on a pipe: the flags every web target uses, a fresh
private profile per browser (0700, where its DevTools socket lives: ``web/relay.py``), and a stop that takes
every process the browser started with it. The browser opens no TCP port of its own.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

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
#: what the browser reads beyond the system's files (``core.sandbox``): Debian's launcher's settings, fonts,
#: the Vulkan loader's list (the software WebGPU adapter)
READS = ("/etc/chromium", "/etc/chromium.d", "/etc/fonts", "/var/cache/fontconfig", "/etc/vulkan")

#: Chromium runs under this shell, whose stdin is a pipe from the process that started it. When that process
#: is gone (even SIGKILLed), the pipe's end stops the browser and every process it started (they stay in the
#: shell's process group), from a session of its own (``setsid``), which then removes the profile once
#: nothing writes there any more. The shell also ends when the browser does. The DevTools pipe's two ends
#: arrive as the shell's stderr (the browser's commands) and stdout (its replies), and become the browser's
#: fds 3 and 4; the shell keeps neither, so the browser's end is the only one.
LIFELINE = """exec 9<&0 0</dev/null
"$@" 3<&2 4>&1 1>/dev/null 2>/dev/null 9<&- &
b=$!
exec 1>/dev/null 2>/dev/null
(read _ <&9
 if command -v setsid >/dev/null; then
   setsid sh -c 'kill -9 -"$0"; sleep 0.3; rm -rf "$1"' $$ "$PORTABILITY_PROFILE" 9<&- &
 else
   kill -9 $b; sleep 0.3; rm -rf "$PORTABILITY_PROFILE"; kill -9 0
 fi) &
exec 9<&-
wait $b
kill -9 0
"""


def short_tmp() -> str | None:
    """The temp folder, unless its path is too long for Chromium's socket path (108 bytes): then /tmp."""
    tmp = tempfile.gettempdir()
    if len(tmp) <= 48 or not os.access("/tmp", os.W_OK):
        return tmp
    return "/tmp"


def confined(argv: list[str], profile: str, mode: str) -> list[str]:
    """The browser's command line in the OS sandbox (``core.sandbox``, in ``mode``): it reads the system's
    files and writes its profile alone. Pages run in its renderers, which its own sandbox does not confine
    here (``--no-sandbox``: no user namespaces for it in a container, none as root); its models come over
    HTTP from the workers' loopback servers, so it reads no model folder and keeps TCP."""
    from portability.core.sandbox import Sandbox, command

    return command(Sandbox(mode=mode, read=READS, write=(profile,), tcp=True), argv)


class Chromium:
    """A running headless Chromium in a fresh profile; ``endpoint`` is its DevTools socket (``unix:PATH``,
    in the profile folder). ``stop()`` kills its whole process group and removes the profile. ``sandbox``:
    the OS sandbox's mode (``core.sandbox.MODES``) it runs in."""

    def __init__(self, webgpu: bool = False, extra_args: list[str] | None = None, sandbox: str = "auto"):
        from portability.web.relay import DevToolsRelay

        self.profile = tempfile.mkdtemp(prefix="portability-chromium-", dir=short_tmp())  # 0700
        self.relay: DevToolsRelay | None = None
        args = confined([chromium_path(), "--headless=new", "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
                         *ARGS, *(WEBGPU_ARGS if webgpu else []), *(extra_args or []), "about:blank"], self.profile, sandbox)
        commands, replies = os.pipe(), os.pipe()  # (read, write) each
        try:
            self.proc = subprocess.Popen(["/bin/sh", "-c", LIFELINE, "sh", *args], stdin=subprocess.PIPE,
                                         stdout=replies[1], stderr=commands[0], start_new_session=True,
                                         env={**os.environ, "TMPDIR": self.profile,  # keeps its socket path short
                                              "HOME": self.profile, "PORTABILITY_PROFILE": self.profile})
        except BaseException:
            for fd in (*commands, *replies):
                os.close(fd)
            shutil.rmtree(self.profile, ignore_errors=True)
            raise
        os.close(commands[0])
        os.close(replies[1])
        try:
            self.relay = DevToolsRelay(commands[1], replies[0], os.path.join(self.profile, "devtools"))
            self.endpoint = self.relay.endpoint
            self._wait_ready()
        except BaseException:
            if self.relay is None:
                os.close(commands[1])
                os.close(replies[0])
            self.stop()
            raise

    def _wait_ready(self) -> None:
        """Wait until the browser answers on its pipe (or fails to start)."""
        from portability.web.cdp import Connection

        deadline = time.monotonic() + START_TIMEOUT_S
        conn = Connection(self.endpoint)
        try:
            cid = conn.send("Browser.getVersion")
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"Chromium exited at start (code {self.proc.returncode})")
                try:
                    conn.wait(cid, timeout=0.1)
                    return
                except TimeoutError:
                    continue
                except ConnectionError:
                    time.sleep(0.1)  # its pipe closed: the process's exit follows
        finally:
            conn.close()
        raise RuntimeError(f"Chromium did not answer on its DevTools pipe within {START_TIMEOUT_S:g} s")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.relay is not None:
            self.relay.close()
        stop_group(self.proc)  # the browser and every renderer / GPU process it started
        shutil.rmtree(self.profile, ignore_errors=True)
