"""An ARM64 (aarch64) userland for running LiteRT and ONNX Runtime's ARM builds under qemu-user emulation.

``provision()`` builds it once into ``<cache>/arm64/`` (or ``$PORTABILITY_ARM64_DIR``; ``portability setup arm64``): a minimal Debian
bookworm arm64 root file system (debootstrap, first stage only, then the downloaded .debs unpacked, since
``--foreign`` leaves them packed), an ARM ``/proc/cpuinfo`` (onnxruntime segfaults on import without
one), and aarch64 wheels of numpy, onnxruntime and ai-edge-litert in ``/opt/site``. ``status()`` says
whether it is usable; ``command()`` is the argv prefix that runs the emulated Python.

Needs ``qemu-user-static`` and ``debootstrap`` (``apt-get install -y qemu-user-static debootstrap``), root
(debootstrap), and network access to the Debian mirror apt already uses and to PyPI — once.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable

PACKAGES = ("numpy", "onnxruntime", "ai-edge-litert")
PLATFORM_TAGS = ("manylinux_2_28_aarch64", "manylinux_2_27_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64")
READY = "ready.json"
BYTECODE = "bytecode.json"
SETUP_HINT = "portability setup arm64"
_SUITE = "bookworm"
_CPUINFO = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1

"""
# an ARM Neoverse-N1 (0xd0c), i.e. a recent phone-class core; one entry per emulated CPU

#: the script the emulated Python runs: the interpreter server ``runtimes/arm64.py`` speaks to
SERVER = Path(__file__).resolve().parent / "arm64_server.py"


def home(root: Path | None = None) -> Path:
    """``<root>/arm64``; root defaults to the cache dir. ``PORTABILITY_ARM64_DIR`` names the folder itself."""
    if root is None and os.environ.get("PORTABILITY_ARM64_DIR"):
        return Path(os.environ["PORTABILITY_ARM64_DIR"])
    if root is None:
        from portability.core.dirs import default_root

        root = default_root()
    return Path(root) / "arm64"


def qemu() -> str | None:
    return shutil.which("qemu-aarch64-static") or (
        "/usr/bin/qemu-aarch64-static" if os.path.exists("/usr/bin/qemu-aarch64-static") else None)


def status(root: Path | None = None) -> tuple[bool, str]:
    """(usable, reason). Cheap: file checks only."""
    if qemu() is None:
        return False, "qemu-aarch64-static is not installed (apt-get install -y qemu-user-static)"
    ready = home(root) / READY
    if not ready.is_file():
        return False, f"the ARM64 emulation environment is not provisioned in {home(root)}"
    rootfs = home(root) / "rootfs"
    if not (rootfs / "usr/bin/python3.11").exists() or not (rootfs / "opt/site").is_dir():
        return False, f"the ARM64 root file system in {rootfs} is incomplete"
    return True, "ready: " + ", ".join(f"{k} {v}" for k, v in json.loads(ready.read_text()).get("versions", {}).items())


def versions(root: Path | None = None) -> dict[str, str]:
    ready = home(root) / READY
    return json.loads(ready.read_text()).get("versions", {}) if ready.is_file() else {}


def command(root: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """argv prefix and environment that run the emulated ``python3.11``."""
    rootfs = home(root) / "rootfs"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "/opt/site", "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "LANG": "C.UTF-8", "HOME": "/tmp"}
    return [qemu() or "qemu-aarch64-static", "-L", str(rootfs), str(rootfs / "usr/bin/python3.11")], env


def compile_bytecode(root: Path | None = None, log: Callable[[str], None] = lambda s: None) -> bool:
    """Compile the emulated Python's standard library and wheels to bytecode, once; True when it is there.

    The emulated interpreter never writes ``.pyc`` files (it sees its root file system through qemu's ``-L``
    prefix, where it cannot create folders), so without them every emulated start compiles each module it
    imports from source, under emulation: importing ONNX Runtime and LiteRT takes 2.8 s instead of 1.5 s.
    Bytecode does not depend on the architecture, so this interpreter writes it when it is the emulated
    one's version (3.11); file names in tracebacks stay the emulated ones (``/usr/lib/python3.11/...``).
    """
    import sys

    base = home(root)
    if (base / BYTECODE).is_file():
        return True
    if sys.version_info[:2] != (3, 11):
        return False
    rootfs = base / "rootfs"
    folders = [str(f) for f in (rootfs / "usr/lib/python3.11", rootfs / "opt/site") if f.is_dir()]
    if not folders:
        return False
    log("compiling the emulated Python's modules to bytecode")
    # exit 1 only means some file did not compile (the standard library's deliberately broken test files);
    # the rest is written, each file atomically, so two checks doing this at once is harmless
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", "-s", str(rootfs), "-p", "/", *folders],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    try:
        (base / BYTECODE).write_text(json.dumps({"python": sys.version.split()[0]}))
    except OSError:
        return False
    return True


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 or one-line sources), else deb.debian.org."""
    for f in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")) + [Path("/etc/apt/sources.list")]:
        try:
            text = f.read_text()
        except OSError:
            continue
        for m in re.finditer(r"^URIs:\s*(\S+)", text, re.M):
            if "security" not in m.group(1):
                return m.group(1)
        for m in re.finditer(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", text, re.M):
            if "security" not in m.group(1):
                return m.group(1)
    return "http://deb.debian.org/debian"


def _pinned(packages: tuple[str, ...]) -> list[str]:
    """The versions this machine runs, so ARM and x86 results come from the same releases."""
    from portability.core.availability import package_version

    return [f"{p}=={package_version(p)}" if package_version(p) != "absent" else p for p in packages]


def _run(cmd: list[str], log: Callable[[str], None], **kw) -> None:
    log("$ " + " ".join(cmd))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", **kw)
    if p.returncode != 0:
        tail = "\n".join(p.stdout.strip().splitlines()[-15:])
        raise RuntimeError(f"{cmd[0]} failed (exit {p.returncode}):\n{tail}")


def provision(root: Path | None = None, log: Callable[[str], None] = print, force: bool = False) -> Path:
    """Build the ARM64 environment (idempotent; minutes, once). Returns its folder. Raises RuntimeError."""
    import sys

    base = home(root)
    if not force and status(root)[0]:
        log(f"ARM64 environment already provisioned in {base}")
        return base
    for tool, pkg in ((qemu(), "qemu-user-static"), (shutil.which("debootstrap") or (os.path.exists("/usr/sbin/debootstrap") and "/usr/sbin/debootstrap"), "debootstrap"),
                      (shutil.which("dpkg-deb"), "dpkg")):
        if not tool:
            raise RuntimeError(f"{pkg} is not installed: apt-get install -y {pkg}")
    rootfs = base / "rootfs"
    base.mkdir(parents=True, exist_ok=True)
    (base / READY).unlink(missing_ok=True)
    if not (rootfs / "usr/bin/python3.11").exists():
        mirror = debian_mirror()
        log(f"bootstrapping a Debian {_SUITE} arm64 root file system from {mirror} (first stage)")
        debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
        _run([debootstrap, "--foreign", "--arch=arm64", "--variant=minbase", "--include=python3.11,libstdc++6,libgomp1",
              _SUITE, str(rootfs), mirror], log)
        debs = sorted((rootfs / "var/cache/apt/archives").glob("*.deb"))
        log(f"unpacking {len(debs)} packages")
        for deb in debs:
            _run(["dpkg-deb", "-x", str(deb), str(rootfs)], lambda s: None)
    (rootfs / "proc").mkdir(exist_ok=True)
    (rootfs / "proc/cpuinfo").write_text(_CPUINFO * 4)
    site = rootfs / "opt/site"
    if site.exists():
        shutil.rmtree(site)
    specs = _pinned(PACKAGES)
    log("installing aarch64 wheels: " + ", ".join(specs))
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--only-binary=:all:"]
    for tag in PLATFORM_TAGS:
        cmd += ["--platform", tag]
    cmd += ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311", "--target", str(site), *specs]
    _run(cmd, log)
    (base / BYTECODE).unlink(missing_ok=True)
    compile_bytecode(root, log)
    log("checking the emulated interpreter (slow: everything runs under qemu)")
    argv, env = command(root)
    probe = ("import json, numpy, onnxruntime, ai_edge_litert; from importlib.metadata import version as v; "
             "print(json.dumps({k: v(k) for k in ('numpy', 'onnxruntime', 'ai-edge-litert')}))")
    p = subprocess.run(argv + ["-c", probe], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("the emulated Python cannot import the runtimes:\n" + "\n".join(p.stderr.strip().splitlines()[-10:]))
    found = json.loads(p.stdout.strip().splitlines()[-1])
    (base / READY).write_text(json.dumps({"versions": found, "mirror": debian_mirror()}, indent=1))
    log("ARM64 environment ready: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    return base
