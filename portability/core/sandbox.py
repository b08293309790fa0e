"""The OS sandbox of every process that reads or runs untrusted model content: the source loaders, the
workers (converters and server and mobile runtimes) and the emulated ARM64 server.

A sandboxed process keeps the rights it needs to compute and nothing else:

- **files** (Landlock, Linux 5.13+): read and execute the system's and this Python's files (``/usr``,
  ``/lib*``, the interpreter's prefixes and ``sys.path``, ``/proc``, ``/sys``, a few files of ``/etc`` that
  the C library reads), read the folders it is given (the model's folder, the run's folder, the cache);
  write only the folders it is given (its own work folder and private temporary folder, and, while it
  converts, the cache's artifact store); nothing else of the file system is readable or writable.
- **network**: a network namespace of its own (no interface but a down loopback) when the process may
  create one, and Landlock's TCP rules (Linux 6.7+): no TCP connection or bind but the loopback ports it
  is given (a web worker's browser and its own page server).
- **scopes** (Linux 6.10+): no signal to, and no abstract unix socket of, a process outside the sandbox.

Landlock restricts the calling thread and everything it starts afterwards; it is entered before any
framework starts a thread. ``narrow`` stacks a second, tighter layer (a worker gives up the cache when its
conversions are done). Nothing here needs a privilege: where the kernel lacks Landlock the process runs
with the allow-lists alone, and ``--sandbox require`` makes that an error.

Two debug switches, for the sandbox's own tests, each turn off one half (``DEBUG_SWITCHES``): set, each is
named wherever the sandbox is described (``status``, the report), and ``--sandbox require`` refuses to run.
"""
from __future__ import annotations

import ctypes
import functools
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: auto: sandbox where the kernel can, say once where it cannot · require: an error where it cannot · off
MODES = ("auto", "require", "off")

# -- Landlock's ABI (include/uapi/linux/landlock.h) ----------------------------------------------------------
_SYS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2
_PR_SET_NO_NEW_PRIVS = 38
_CLONE_NEWNET = 0x40000000

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

#: the file-system rights each ABI version handles
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
#: rights that apply to a file (the others only to a folder)
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
_READ = EXECUTE | READ_FILE | READ_DIR
_WRITE = (_READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_SYM
          | REFER | TRUNCATE)
_DEV = READ_FILE | WRITE_FILE | IOCTL_DEV

#: read by the system's libraries (the dynamic loader, time zones, name resolution of "localhost")
_ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/timezone",
        "/etc/nsswitch.conf", "/etc/host.conf", "/etc/hosts", "/etc/gai.conf", "/etc/os-release",
        "/etc/mime.types", "/etc/ssl/openssl.cnf")
_SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/proc", "/sys")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
#: a CUDA or DRM GPU's device files (listed, so only before the first layer: see ``_gpu_devices``)
_GPU_DEVICE_GLOBS = ("/dev/nvidia*", "/dev/dri/*")


#: debug switches (set to 1) for the sandbox's own tests, and the half of the sandbox each turns off: Landlock
#: (what a kernel without it gets), or the sources' allow-lists (the OS sandbox alone around a model)
NO_LANDLOCK, NO_ALLOWLISTS = "PORTABILITY_DEBUG_NO_LANDLOCK", "PORTABILITY_DEBUG_NO_ALLOWLISTS"
DEBUG_SWITCHES = {NO_LANDLOCK: "Landlock", NO_ALLOWLISTS: "allow-lists"}


def debug_switches() -> tuple[str, ...]:
    """The debug switches set in this environment, in ``DEBUG_SWITCHES``' order."""
    return tuple(name for name in DEBUG_SWITCHES if os.environ.get(name) == "1")


def switched_off(mode: str = "auto") -> str:
    """What the debug switches turn off under ``mode`` ("Landlock off by PORTABILITY_DEBUG_NO_LANDLOCK; ..."),
    or "" where none is set (Landlock's switch changes nothing under ``off``)."""
    names = [n for n in debug_switches() if not (mode == "off" and n == NO_LANDLOCK)]
    return "; ".join(f"{DEBUG_SWITCHES[n]} off by {n}" for n in names)


def default_mode() -> str:
    """``$PORTABILITY_SANDBOX`` (auto, require, off), else auto: the mode of a check that names none."""
    mode = os.environ.get("PORTABILITY_SANDBOX") or "auto"
    return mode if mode in MODES else "auto"


class SandboxError(RuntimeError):
    """The sandbox was required and could not be set up."""


@dataclass(frozen=True)
class Sandbox:
    """What one sandboxed process may touch (plain values: it crosses the worker boundary in the job)."""

    mode: str = "auto"
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    #: loopback TCP ports it may connect to (a web worker's browser), and whether it may listen (its page server)
    connect_ports: tuple[int, ...] = ()
    bind: bool = False
    #: TCP left to the process (a browser, which fetches its pages from the loopback servers of its workers)
    tcp: bool = False
    #: folders writable only until ``narrow()`` (a worker's cache while it converts)
    write_until_narrowed: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "Sandbox":
        d = dict(d or {})
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in cls.__dataclass_fields__})

    @property
    def network(self) -> bool:
        return bool(self.connect_ports or self.bind or self.tcp)


# -- what the kernel offers -----------------------------------------------------------------------------------

def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _syscalls() -> tuple[int, int, int] | None:
    return _SYS.get(platform.machine()) if sys.platform == "linux" else None


def landlock_abi() -> int:
    """Landlock's ABI version in this kernel (0: none; also under the debug switch ``NO_LANDLOCK``)."""
    calls = _syscalls()
    if calls is None or NO_LANDLOCK in debug_switches():
        return 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    v = libc.syscall(ctypes.c_long(calls[0]), None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(v) if v > 0 else 0


def can_isolate_network() -> bool:
    """A network namespace of its own: a process with CAP_SYS_ADMIN can make one."""
    try:
        with open("/proc/self/status") as f:
            caps = next(int(ln.split()[1], 16) for ln in f if ln.startswith("CapEff:"))
        return bool(caps & (1 << 21))
    except (OSError, StopIteration, ValueError):
        return False


def status() -> tuple[bool, str]:
    """(can Landlock be set up here, what the sandbox gives or why not) — asked once by the check. A debug
    switch that is set is named in the second, as what turned that half off."""
    abi, off, switches = landlock_abi(), switched_off(), debug_switches()
    if abi > 0:
        net = "own network namespace" if can_isolate_network() else (
            "no TCP but the given loopback ports" if abi >= 4 else "network not restricted (Landlock ABI < 4)")
        return True, "; ".join(filter(None, (f"Landlock ABI {abi}: files confined, {net}", off)))
    kernel = "" if NO_LANDLOCK in switches else (
        f"the kernel ({platform.release()}) has no Landlock (Linux 5.13+, enabled in its LSM list)")
    alone = ("models are loaded neither vetted nor confined" if NO_ALLOWLISTS in switches
             else "models are checked with the allow-lists alone")
    return False, f"{'; '.join(filter(None, (kernel, off)))}: {alone}"


def describe(mode: str) -> str:
    """The sandbox a check under ``mode`` ran in, in one line (a report's ``environment.sandbox``): what
    confined its models, or "none: " and why not, and every debug switch that was set."""
    if mode == "off":
        return "; ".join(filter(None, ("off (--sandbox off)", switched_off(mode))))
    ok, why = status()
    return why if ok else f"none: {why}"


# -- entering it -----------------------------------------------------------------------------------------------

class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _python_paths() -> list[str]:
    """This Python's folders and its import path, but not the folder it was started in (``python -m`` puts it
    first on ``sys.path``: a check started from the user's home would have the home readable)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    cwd = os.path.realpath(os.getcwd())
    paths |= {p for p in sys.path if p and os.path.realpath(p) != cwd}
    paths.add(str(Path(__file__).resolve().parents[2]))  # this portability (an editable checkout, or site-packages)
    return sorted(paths)


@functools.lru_cache(maxsize=1)
def _gpu_devices() -> tuple[str, ...]:
    """A CUDA or DRM GPU's device files, where the machine has them (``server/ort-cuda``). Listed once, before
    the first layer: a confined process cannot list ``/dev``, and a second layer (``narrow``) without them
    leaves CUDA with "no CUDA-capable device"."""
    import glob

    return tuple(sorted(p for g in _GPU_DEVICE_GLOBS for p in glob.glob(g)))


def _layer(abi: int, read: list[str], write: list[str], sb: Sandbox) -> int:
    """A Landlock ruleset fd for one layer."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    create, add, _ = _syscalls()  # type: ignore[misc]
    fs = _FS_BY_ABI.get(abi, _FS_BY_ABI[5])
    attr = _RulesetAttr(fs, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 and not sb.tcp else 0,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    fd = libc.syscall(ctypes.c_long(create), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")

    def allow(path: str, rights: int) -> None:
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # absent here: nothing to allow
        try:
            if not os.path.isdir(path):
                rights &= _FILE_RIGHTS
            rule = _PathBeneath(rights & fs, pfd)
            if libc.syscall(ctypes.c_long(add), ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH),
                            ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
        finally:
            os.close(pfd)

    try:
        for p in list(_SYSTEM) + _python_paths() + list(_ETC) + read:
            allow(p, _READ)
        for p in list(_DEVICES) + list(_gpu_devices()):
            allow(p, _DEV)
        # its own threads' files (CUDA's runtime writes there: cudaSetDevice fails with error 304 without it)
        allow(f"/proc/{os.getpid()}/task", READ_FILE | WRITE_FILE | TRUNCATE)  # fopen "w": O_TRUNC
        for p in write:
            allow(p, _WRITE)
        if abi >= 4 and not sb.tcp:
            ports = [(NET_CONNECT_TCP, p) for p in sb.connect_ports] + ([(NET_BIND_TCP, 0)] if sb.bind else [])
            for right, port in ports:
                rule = _NetPort(right, port)
                if libc.syscall(ctypes.c_long(add), ctypes.c_int(fd), ctypes.c_int(_RULE_NET_PORT),
                                ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"landlock_add_rule(port {port}): {os.strerror(err)}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _restrict(fd: int) -> None:
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    try:
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(ctypes.c_long(_syscalls()[2]), ctypes.c_int(fd), ctypes.c_uint32(0)) < 0:  # type: ignore[index]
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(fd)


def _own_network() -> bool:
    libc = _libc()
    return libc.unshare(ctypes.c_int(_CLONE_NEWNET)) == 0


def enter(sb: Sandbox) -> str | None:
    """Confine this process (and what it starts from now on) to ``sb``. Returns None when confined, or why
    it is not (``mode`` auto); raises SandboxError when ``mode`` is require and it cannot be."""
    if sb.mode == "off":
        return "switched off (--sandbox off)"
    if sb.mode == "require" and debug_switches():
        raise SandboxError(f"the sandbox could not be set up: {switched_off()} (debug switches of its own tests)")
    try:
        abi = landlock_abi()
        if abi <= 0:
            raise OSError(0, status()[1])
        if not sb.network and can_isolate_network() and not _own_network():
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
        write = list(sb.write) + list(sb.write_until_narrowed)
        _restrict(_layer(abi, list(sb.read) + write, write, sb))
    except OSError as e:
        if sb.mode == "require":
            raise SandboxError(f"the sandbox could not be set up: {e.strerror or e}") from None
        return str(e.strerror or e)
    os.environ["PORTABILITY_SANDBOXED"] = "1"
    return None


def narrow(sb: Sandbox) -> None:
    """A second layer without the folders writable only until now (a worker done with its conversions)."""
    if sb.mode == "off" or not sb.write_until_narrowed or os.environ.get("PORTABILITY_SANDBOXED") != "1":
        return
    abi = landlock_abi()
    try:
        _restrict(_layer(abi, list(sb.read) + list(sb.write_until_narrowed), list(sb.write), sb))
    except OSError as e:
        if sb.mode == "require":
            raise SandboxError(f"the sandbox could not be narrowed: {e.strerror or e}") from None


def private_env(env: dict[str, str], tmp: Path) -> dict[str, str]:
    """A sandboxed process's environment: its private temporary folder, and the user's name from the
    environment (libraries that ask for it must not need ``/etc/passwd``)."""
    env = dict(env, TMPDIR=str(tmp), TEMP=str(tmp), TMP=str(tmp), KERAS_HOME=str(tmp / "keras"))
    if not env.get("USER"):
        import getpass

        try:
            env["USER"] = getpass.getuser()
        except Exception:
            env["USER"] = str(os.getuid())
    env.setdefault("LOGNAME", env["USER"])
    return env


def main(argv: list[str]) -> None:
    """``python -m portability.core.sandbox SPEC_JSON PROGRAM ARGS...``: confine, then become PROGRAM (a module of
    this interpreter, ``python -m MODULE``, runs in this process: a fork of the worker pool, its imports made)."""
    sb = Sandbox.from_dict(json.loads(argv[0]))
    try:
        why = enter(sb)
    except SandboxError as e:
        print(str(e), file=sys.stderr)
        os._exit(70)
    if why:
        print(f"not sandboxed: {why}", file=sys.stderr)
    if len(argv) > 3 and argv[1] == sys.executable and argv[2] == "-m":  # this interpreter's module: run here
        import runpy

        sys.argv = argv[3:]
        runpy.run_module(argv[3], run_name="__main__", alter_sys=True)
        return
    os.execvp(argv[1], argv[1:])


def module_argv(sb: Sandbox, module_args: list[str]) -> list[str]:
    """``python -m MODULE ARGS`` (``module_args`` = ``[MODULE, ARGS...]``) under ``sb``, as a module's command line
    for a runner of modules (a fork of the worker pool): this launcher's, confining before the module runs."""
    if sb.mode == "off":
        return list(module_args)
    return ["portability.core.sandbox", json.dumps(sb.to_dict()), sys.executable, "-m", *module_args]


def command(sb: Sandbox, argv: list[str]) -> list[str]:
    """``argv`` run under ``sb`` (through this module's launcher); ``argv`` itself when ``sb`` is off."""
    if sb.mode == "off":
        return list(argv)
    return [sys.executable, "-P", "-m", "portability.core.sandbox", json.dumps(sb.to_dict())] + list(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
