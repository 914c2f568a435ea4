"""Run untrusted Python code in a sandboxed subprocess: :func:`run_python`.

The code runs in a fresh interpreter (``python -I -S``: no site-packages, no ``PYTHON*``
variables), in a private temporary directory that is its cwd, ``HOME`` and ``TMPDIR`` and is
deleted afterwards, with an empty environment (only ``PATH``, ``LANG``, ``HOME``, ``TMPDIR``).
Layers, each used when the machine allows it (probed once, recorded in
:attr:`SandboxResult.isolation`):

``namespaces``
    ``unshare --net --pid --mount --fork --kill-child --mount-proc``: no network interface but a
    down loopback; its own PID space (when its first process dies the kernel kills every other
    process in it, so nothing can outlive the call); its own mounts, where world-writable
    directories (``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock``) are covered by private,
    read-only tmpfs mounts. A non-root caller gets a user namespace (``--map-current-user``).
``uid``
    As root, the code runs as a fresh unprivileged uid (one per call, so ``RLIMIT_NPROC``, which
    the kernel does not apply to root, bounds forks per call and calls cannot touch each
    other). If the interpreter lives under a directory that uid cannot traverse (``/root``),
    that directory is covered with a tmpfs in the private mount namespace and only the
    interpreter's prefix is bind-mounted back read-only, which also hides the rest of it.
``landlock``
    A Landlock ruleset (kernel >= 5.13): file writes, creations and deletions only beneath the
    temporary directory (and ``/dev/null``); TCP bind/connect denied (ABI >= 4); signals and
    abstract unix sockets outside the sandbox denied (ABI >= 6). It holds even for root.
``rlimits``
    CPU seconds, address space, file size, process count, open files; core dumps off.
``audit-hook``
    A ``sys.addaudithook`` hook installed before the code runs that refuses internet sockets,
    connect/bind/sendto and name resolution. In-process, so only a second layer.

The parent enforces a wall-clock timeout (SIGKILL to the process group, then to every process
of the sandbox uid), reads stdout/stderr incrementally and kills the code once either passes
``max_output_bytes`` (so 200 MB of output costs 64 kB of memory), and always removes the
temporary directory.

What this module deliberately does not do: seccomp syscall filtering, cgroup memory/CPU
accounting, disk quotas beyond ``RLIMIT_FSIZE`` per file, or hiding world-readable files
(the code may read what any unprivileged user may read). Without root, namespaces or
Landlock it degrades to rlimits + audit hook and logs a warning once: do not run hostile code
on such a machine. It is stdlib-only on purpose: this file is also the setup stage
(``python -I -S sandbox.py --stage1 CONFIG``) that runs inside the namespaces before the
untrusted interpreter starts.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import resource
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SETUP_EXIT = 121  # exit status of a failed setup stage (before any untrusted code ran)
# A per-call uid is drawn from here (root only): far above any real account or subuid range.
UID_BASE, UID_SPAN = 1_900_000_000, 50_000_000
WORLD_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
MAIN_FILE = "main.py"

# The untrusted interpreter runs this with ``-c`` before the user's code: the audit hook, then
# main.py as ``__main__``. Kept short and stdlib-only; its traceback frame is "<string>".
BOOTSTRAP = r"""
import sys, types
def _e3_deny(event, args, _blocked=frozenset({"socket.connect", "socket.bind", "socket.sendto",
        "socket.sendmsg", "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
        "socket.gethostbyname_ex", "socket.getnameinfo"})):
    if event == "socket.__new__" and args[1] not in (1,):  # only AF_UNIX sockets may be created
        raise PermissionError("network access is disabled in this sandbox")
    if event in _blocked and (event.startswith("socket.get") or getattr(args[0], "family", 0) != 1):
        raise PermissionError("network access is disabled in this sandbox")
sys.addaudithook(_e3_deny)
del _e3_deny
sys.argv = ["main.py"]
sys.path.insert(0, "")
_m = types.ModuleType("__main__")
_m.__file__ = "main.py"
sys.modules["__main__"] = _m
with open("main.py", encoding="utf-8") as _f:
    _c = compile(_f.read(), "main.py", "exec")
del _f
exec(_c, _m.__dict__)
"""


@dataclass
class SandboxResult:
    """What one sandboxed run produced. ``error`` is None exactly when ``ok``."""

    ok: bool
    exit_code: int | None
    stdout: str
    stderr: str
    error: str | None
    timed_out: bool = False
    truncated: bool = False
    wall_s: float = 0.0
    isolation: tuple[str, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------------------------
# What this machine allows (probed once per process)


@dataclass(frozen=True)
class _Capabilities:
    root: bool
    namespaces: tuple[str, ...]  # the unshare command prefix, () when unavailable
    landlock_abi: int  # 0 when unavailable


_CAPS: _Capabilities | None = None
_CAPS_LOCK = threading.Lock()
_UID_LOCK = threading.Lock()
_UIDS_IN_USE: set[int] = set()


def _unshare_prefix(root: bool) -> tuple[str, ...]:
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    prefix = [exe]
    if not root:
        prefix.append("--map-current-user")
    prefix += ["--net", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc", "--"]
    try:
        probe = subprocess.run(
            [*prefix, sys.executable, "-I", "-S", "-c", "pass"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=15,
            env=_minimal_env("/"),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("unshare probe failed: %s", exc)
        return ()
    if probe.returncode != 0:
        log.debug("unshare probe failed: %s", probe.stderr.decode(errors="replace").strip())
        return ()
    return tuple(prefix)


def _landlock_abi() -> int:
    if not sys.platform.startswith("linux"):
        return 0
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        abi = int(libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except (OSError, AttributeError):
        return 0
    return max(abi, 0)


def capabilities() -> _Capabilities:
    """Probe (once) which isolation mechanisms work here."""
    global _CAPS
    with _CAPS_LOCK:
        if _CAPS is None:
            root = os.geteuid() == 0
            caps = _Capabilities(root=root, namespaces=_unshare_prefix(root), landlock_abi=_landlock_abi())
            if not caps.namespaces and not caps.landlock_abi:
                log.warning(
                    "sandbox: neither namespaces nor Landlock are available; untrusted code is confined "
                    "only by rlimits%s and an audit hook",
                    " and a separate uid" if root else "",
                )
            log.debug("sandbox capabilities: %s", caps)
            _CAPS = caps
        return _CAPS


# --------------------------------------------------------------------------------------------
# Helpers used by the parent


def _minimal_env(home: str) -> dict[str, str]:
    # Nothing inherited: no API keys, tokens or proxies reach the code.
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": home, "TMPDIR": home}


def _traversable_by_others(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return bool(st.st_mode & stat.S_IXOTH)


def _blocked_ancestor(path: str) -> str | None:
    """The top-most ancestor of ``path`` (or itself) that an unprivileged uid cannot traverse."""
    parts = Path(path).parts
    for i in range(1, len(parts) + 1):
        candidate = str(Path(*parts[:i]))
        if not _traversable_by_others(candidate):
            return candidate
    return None


def _interpreter() -> str:
    return os.path.realpath(sys.executable)


def _interpreter_roots() -> list[str]:
    """Directories the untrusted interpreter must be able to read (binary, stdlib, libpython)."""
    cands = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix, os.path.dirname(_interpreter()))}
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir and os.path.isdir(libdir):
        cands.add(os.path.realpath(libdir))
    # keep only the outermost ones
    return sorted(c for c in cands if not any(c != o and c.startswith(o.rstrip("/") + "/") for o in cands))


def _covers(workdir: str, root: bool) -> list[dict[str, Any]] | None:
    """Mount plan for the setup stage, or None if the interpreter cannot be exposed."""
    covers: dict[str, list[list[Any]]] = {}
    if root:
        for needed in _interpreter_roots():
            blocked = _blocked_ancestor(needed)
            if blocked is None:
                continue
            if blocked == needed:
                return None  # the prefix itself is private; re-exposing it would not help
            covers.setdefault(blocked, []).append([needed, True])
    for ww in WORLD_WRITABLE_DIRS:
        if os.path.isdir(ww) and not os.path.islink(ww) and ww not in covers:
            expose = [[workdir, False]] if workdir.startswith(os.path.realpath(ww) + "/") else []
            covers[os.path.realpath(ww)] = expose
    return [{"path": p, "expose": e} for p, e in covers.items()]


def _uids_of_processes() -> dict[int, list[int]]:
    """uid -> pids of live processes, from /proc (Linux)."""
    out: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
        except OSError:
            continue
        out.setdefault(uid, []).append(int(entry))
    return out


def _tasks_of_uid(uid: int) -> int:
    total = 0
    for pid in _uids_of_processes().get(uid, []):
        try:
            total += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            total += 1
    return total


def _acquire_uid() -> int:
    rng = random.SystemRandom()
    busy = set(_uids_of_processes())
    with _UID_LOCK:
        while True:
            uid = UID_BASE + rng.randrange(UID_SPAN)
            if uid not in busy and uid not in _UIDS_IN_USE:
                _UIDS_IN_USE.add(uid)
                return uid


def _release_uid(uid: int) -> None:
    with _UID_LOCK:
        _UIDS_IN_USE.discard(uid)


def _kill_uid(uid: int) -> int:
    """SIGKILL every process owned by ``uid`` (processes that escaped the process group)."""
    killed = 0
    for _ in range(20):
        pids = _uids_of_processes().get(uid, [])
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        time.sleep(0.01)
    return killed


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _rmtree(path: str) -> None:
    def _fix(func: Any, p: str, _exc: Any) -> None:
        # The code may have chmod-ed things read-only; make them writable and retry once.
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=_fix)
    else:
        shutil.rmtree(path, onerror=_fix)


def _safe_relpath(name: str) -> str:
    p = Path(name)
    if not name or p.is_absolute() or ".." in p.parts or name.strip() != name:
        raise ValueError(f"extra file name must be a plain relative path, got {name!r}")
    if p.parts[0] == MAIN_FILE:
        raise ValueError(f"extra file name {name!r} clashes with the code file {MAIN_FILE}")
    return str(p)


def _describe_signal(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


# --------------------------------------------------------------------------------------------
# The public entry point


def run_python(
    code: str,
    *,
    stdin: str = "",
    timeout_s: float = 10,
    cpu_s: float | None = None,
    memory_mb: int = 512,
    max_procs: int = 16,
    max_output_bytes: int = 64_000,
    extra_files: dict[str, str] | None = None,
    file_size_mb: int = 64,
    max_open_files: int = 256,
) -> SandboxResult:
    """Run ``code`` in the sandbox; never raises for anything the code does.

    ``cpu_s`` defaults to a little over ``timeout_s`` (so the wall clock normally decides);
    ``max_procs`` counts processes and threads; ``max_output_bytes`` applies to stdout and
    stderr separately. ``extra_files`` (relative name → text) are written next to ``main.py``.
    Raises ValueError only for invalid arguments.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if memory_mb < 32:
        raise ValueError(f"memory_mb must be at least 32 (the interpreter itself needs ~20 MB), got {memory_mb}")
    if max_procs < 1 or max_output_bytes < 1:
        raise ValueError("max_procs and max_output_bytes must be positive")
    files = {_safe_relpath(k): v for k, v in (extra_files or {}).items()}
    caps = capabilities()
    cpu_limit = max(1, math.ceil(cpu_s if cpu_s is not None else timeout_s + 1))

    workdir = os.path.realpath(tempfile.mkdtemp(prefix="e3orch-sbx-"))
    uid: int | None = None
    # The setup stage reports the code's exit status on this pipe; both ends are closed here,
    # in the finally below, and nowhere else.
    status_r, status_w = os.pipe()
    start = time.monotonic()
    try:
        os.chmod(workdir, 0o700)
        for rel, text in {MAIN_FILE: code, **files}.items():
            target = Path(workdir, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")

        isolation: list[str] = []
        covers: list[dict[str, Any]] = []
        if caps.namespaces:
            plan = _covers(workdir, caps.root)
            if plan is not None:
                covers = plan
                isolation.append("namespaces")
        if caps.root:
            # Without a mount namespace the uid must be able to reach the interpreter as is.
            reachable = all(_blocked_ancestor(r) is None for r in [*_interpreter_roots(), workdir])
            if isolation or reachable:
                uid = _acquire_uid()
                for dirpath, _dirs, fnames in os.walk(workdir):
                    os.chown(dirpath, uid, uid)
                    for fname in fnames:
                        os.chown(os.path.join(dirpath, fname), uid, uid)
                isolation.append("uid")
            else:
                log.warning("sandbox: running as root without a separate uid (interpreter unreachable)")
        if caps.landlock_abi:
            isolation.append("landlock")
        isolation += ["rlimits", "audit-hook"]

        if uid is not None or "namespaces" in isolation and not caps.root:
            nproc = max_procs  # a fresh uid, or a fresh user namespace, counts only this call's tasks
        else:
            nproc = _tasks_of_uid(os.getuid()) + max_procs  # the limit counts all of this user's tasks
        config = {
            "status_fd": status_w,
            "workdir": workdir,
            "exe": _interpreter(),
            "argv": ["-I", "-S", "-u", "-c", BOOTSTRAP],  # unbuffered: partial output survives a kill
            "env": _minimal_env(workdir),
            "covers": covers if caps.root else [],
            "uid": uid,
            "landlock_abi": caps.landlock_abi,
            "rlimits": {
                "RLIMIT_CPU": [cpu_limit, cpu_limit + 1],
                "RLIMIT_AS": [memory_mb * 2**20] * 2,
                "RLIMIT_FSIZE": [file_size_mb * 2**20] * 2,
                "RLIMIT_NPROC": [nproc] * 2,
                "RLIMIT_NOFILE": [max_open_files] * 2,
                "RLIMIT_CORE": [0, 0],
            },
        }
        stage1 = [sys.executable, "-I", "-S", os.path.abspath(__file__), "--stage1", json.dumps(config)]
        cmd = [*caps.namespaces, *stage1] if "namespaces" in isolation else stage1
        return _supervise(
            cmd,
            status_fds=(status_r, status_w),
            workdir=workdir,
            stdin=stdin,
            timeout_s=timeout_s,
            max_output_bytes=max_output_bytes,
            uid=uid,
            isolation=tuple(isolation),
            start=start,
        )
    finally:
        if uid is not None:
            _kill_uid(uid)
            _release_uid(uid)
        _rmtree(workdir)
        os.close(status_r)
        os.close(status_w)


def _read_status(fd: int) -> tuple[str | None, int | None]:
    """Parse the setup stage's report: (setup error, exit code as Popen reports it).

    Read without blocking once the process has exited (our own write end is still open).
    """
    os.set_blocking(fd, False)
    data = b""
    try:
        while chunk := os.read(fd, 4096):
            data += chunk
    except BlockingIOError:
        pass
    setup_error, rc = None, None
    for line in data.decode(errors="replace").splitlines():
        kind, _, value = line.partition(" ")
        if kind == "setup":
            setup_error = value
        elif kind == "exit" and value.lstrip("-").isdigit():
            rc = int(value)
        elif kind == "signal" and value.isdigit():
            rc = -int(value)
    return setup_error, rc


def _supervise(
    cmd: list[str],
    *,
    status_fds: tuple[int, int],
    workdir: str,
    stdin: str,
    timeout_s: float,
    max_output_bytes: int,
    uid: int | None,
    isolation: tuple[str, ...],
    start: float,
) -> SandboxResult:
    deadline = start + timeout_s
    bufs: dict[int, bytearray] = {}
    timed_out = truncated = False
    # stdin from an unlinked temp file: no writer thread, no pipe deadlock on large inputs.
    with tempfile.TemporaryFile() as stdin_file:
        stdin_file.write(stdin.encode("utf-8"))
        stdin_file.seek(0)
        proc = subprocess.Popen(
            cmd,
            stdin=stdin_file,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=_minimal_env(workdir),
            start_new_session=True,  # its own process group, killed as a whole
            close_fds=True,
            pass_fds=(status_fds[1],),
        )
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    streams = {out_fd: proc.stdout, err_fd: proc.stderr}
    try:
        with selectors.DefaultSelector() as sel:
            for fd in streams:
                bufs[fd] = bytearray()
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(timeout=min(remaining, 0.25)):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fd)
                        continue
                    buf = bufs[key.fd]
                    room = max_output_bytes - len(buf)
                    buf += chunk[: max(room, 0)]
                    if len(chunk) > room:
                        truncated = True
                if truncated:
                    break
        if not timed_out and not truncated:
            # Both pipes closed: wait (without reaping, so the process group id stays valid)
            # for the leader to exit; code may close its stdout and keep running.
            while True:
                if hasattr(os, "waitid"):
                    if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                        break
                elif proc.poll() is not None:  # no waitid (not Linux): reaps, a negligible pgid-reuse risk
                    break
                if time.monotonic() >= deadline:
                    timed_out = True
                    break
                time.sleep(0.005)
    finally:
        # Kill the whole group even after a clean exit: children the code left behind go too.
        _killpg(proc.pid)
        proc.wait()
        for f in streams.values():
            f.close()
        if uid is not None:
            _kill_uid(uid)
        setup_error, status_rc = _read_status(status_fds[0])
    wall_s = time.monotonic() - start
    rc = status_rc if status_rc is not None else proc.returncode
    stdout = bufs[out_fd].decode("utf-8", errors="replace")
    stderr = bufs[err_fd].decode("utf-8", errors="replace")
    error: str | None = None
    if timed_out:
        error = f"timeout after {timeout_s:g}s"
    elif truncated:
        error = f"output truncated at {max_output_bytes} bytes (process killed)"
    elif setup_error is not None:
        error = f"sandbox setup failed: {setup_error}"
    elif rc != 0:
        tail = stderr.strip().splitlines()[-1:] or [""]
        if "MemoryError" in tail[0] or "Cannot allocate memory" in stderr:
            error = "memory limit exceeded"
        elif rc == -signal.SIGXCPU:
            error = "cpu time limit exceeded"
        elif rc < 0:
            error = f"killed by {_describe_signal(-rc)}"
        else:
            error = f"exit code {rc}" + (f": {tail[0][:300]}" if tail[0] else "")
    return SandboxResult(
        ok=error is None,
        exit_code=None if timed_out or truncated else rc,
        stdout=stdout,
        stderr=stderr,
        error=error,
        timed_out=timed_out,
        truncated=truncated,
        wall_s=wall_s,
        isolation=isolation,
    )


# --------------------------------------------------------------------------------------------
# The setup stage: runs as ``python -I -S sandbox.py --stage1 CONFIG`` inside the namespaces,
# as the caller (root or not), then execs the untrusted interpreter. No untrusted code runs here.

_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC = 1, 2, 4, 32, 4096, 16384
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 1, 24, 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _libc() -> Any:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(rc: int, what: str) -> int:
    if rc < 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


def _stage1_mounts(covers: list[dict[str, Any]]) -> None:
    libc = _libc()

    def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
        enc = [None if s is None else s.encode() for s in (src, target, fstype, data)]
        _check(libc.mount(enc[0], enc[1], enc[2], flags, enc[3]), f"mount {target}")

    # Open everything to re-expose first: covering a directory hides what is beneath it.
    fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for c in covers for p, _ro in c["expose"]}
    for cover in covers:
        mount("tmpfs", cover["path"], "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=755,size=1m")
        for path, readonly in cover["expose"]:
            os.makedirs(path, mode=0o755, exist_ok=True)
            mount(f"/proc/self/fd/{fds[path]}", path, None, _MS_BIND | _MS_REC, None)
            if readonly:
                mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)
        # read-only over the whole cover: nothing new can appear next to the re-exposed paths
        mount(None, cover["path"], None, _MS_REMOUNT | _MS_NOSUID | _MS_NODEV | _MS_RDONLY, None)
    for fd in fds.values():
        os.close(fd)


def _stage1_landlock(abi: int, workdir: str) -> None:
    import ctypes

    libc = _libc()
    write_file, truncate = 1 << 1, 1 << 14
    fs = 0
    for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12):  # write, remove dir/file, make char/dir/reg/sock/fifo/block/sym
        fs |= 1 << bit
    if abi >= 2:
        fs |= 1 << 13  # refer (rename/link across directories)
    if abi >= 3:
        fs |= truncate
    net = 0b11 if abi >= 4 else 0  # bind_tcp | connect_tcp: none allowed
    scoped = 0b11 if abi >= 6 else 0  # abstract unix sockets | signals outside the sandbox

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    attr = RulesetAttr(fs, net, scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = _check(
        libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)),
        "landlock_create_ruleset",
    )
    for path, allowed in ((workdir, fs), ("/dev/null", write_file | (truncate if abi >= 3 else 0))):
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        rule = PathBeneath(allowed, fd)
        _check(
            libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0)),
            f"landlock_add_rule {path}",
        )
        os.close(fd)
    _check(libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)), "landlock_restrict_self")
    os.close(ruleset)


def _drop_capabilities(libc: Any) -> None:
    """Drop every capability, for good (bounding set too, so exec cannot regain them).

    Only used when the code has to run as uid 0 (no separate uid was possible): root without
    capabilities cannot load modules, mount, or override file permissions.
    """
    import ctypes

    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last_cap = int(f.read())
    except OSError:
        last_cap = 63
    for cap in range(last_cap + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL for caps this kernel lacks: fine

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    _check(libc.capset(ctypes.byref(Header(_LINUX_CAPABILITY_VERSION_3, 0)), (Data * 2)()), "capset")


def _stage1_child(config: dict[str, Any], status_fd: int) -> None:
    """Drop privileges, confine, and exec the untrusted interpreter (never returns)."""
    try:
        for name, (soft, hard) in config["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (soft, hard))
        libc = _libc()
        uid = config["uid"]
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        elif os.geteuid() == 0:
            _drop_capabilities(libc)
        # Die with the supervising stage (set after the uid change, which would clear it).
        _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        if config["landlock_abi"]:
            _stage1_landlock(int(config["landlock_abi"]), config["workdir"])
        exe = config["exe"]
        os.execve(exe, [exe, *config["argv"]], config["env"])  # status_fd is close-on-exec
    except BaseException as exc:  # noqa: BLE001 - report any setup failure, never run the code
        os.write(status_fd, f"setup {type(exc).__name__}: {exc}\n".encode())
        os._exit(SETUP_EXIT)


def _stage1(config: dict[str, Any]) -> None:
    """Set up mounts, start the code in a confined child, reap until it exits, report its status.

    In a PID namespace this process is its init: it reaps orphans (which would otherwise count
    against ``RLIMIT_NPROC`` as zombies), and its exit makes the kernel kill whatever is left.
    The status goes to a dedicated pipe, so the code's own stdout/stderr and exit code cannot
    forge it (and ``unshare`` does not have to forward signals).
    """
    status_fd = int(config["status_fd"])
    os.set_inheritable(status_fd, False)
    try:
        if config["covers"]:
            _stage1_mounts(config["covers"])
        os.chdir(config["workdir"])  # the (re-exposed) directory, not the one hidden beneath a cover
        child = os.fork()
    except BaseException as exc:  # noqa: BLE001
        os.write(status_fd, f"setup {type(exc).__name__}: {exc}\n".encode())
        os._exit(SETUP_EXIT)
    if child == 0:
        _stage1_child(config, status_fd)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(SETUP_EXIT)
        except InterruptedError:
            continue
        if pid == child:
            break
    if os.WIFSIGNALED(status):
        os.write(status_fd, f"signal {os.WTERMSIG(status)}\n".encode())
    else:
        os.write(status_fd, f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
    os._exit(0)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--stage1":
    _stage1(json.loads(sys.argv[2]))
