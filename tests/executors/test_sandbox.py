"""The Python sandbox against hostile code: loops, memory, forks, network, writes, secrets, output.

Every test checks the outcome (a clear error or capped output) and that nothing is left behind:
no process whose command line carries the test's unique marker, no temporary directory. The
isolation layers are also checked one at a time (network and writes must stay blocked with
only namespaces + uid, and with only Landlock), on whatever this machine supports.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e3orch.executors import sandbox
from e3orch.executors.sandbox import run_python

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's limits are Linux-specific"),
    pytest.mark.timeout(120),
]

REPO = Path(__file__).resolve().parents[2]
CAPS = sandbox.capabilities() if sys.platform.startswith("linux") else None


def marker_pids(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker`` (zombies have an empty one)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker.encode() in cmdline:
            pids.append(int(entry))
    return pids


def assert_no_leftovers(marker: str) -> None:
    # Killing is synchronous, but /proc can lag a reaping by a moment: poll briefly.
    for _ in range(100):
        if not marker_pids(marker):
            return
        time.sleep(0.02)
    pytest.fail(f"processes left behind: {marker_pids(marker)}")


@pytest.fixture
def marker() -> str:
    return f"e3orch-test-marker-{uuid.uuid4().hex}"


@pytest.fixture(autouse=True)
def sandbox_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private parent for the sandboxes' temporary directories, checked empty afterwards."""
    tmp_path_factory.getbasetemp()  # pytest's own temp root, before tempfile is redirected
    root = Path(tempfile.mkdtemp(prefix="e3orch-sbx-test-"))
    root.chmod(0o755)  # traversable, as /tmp is, so a dropped uid can reach its own directory
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    yield root
    left = list(root.iterdir())
    for p in left:
        sandbox._rmtree(str(p))
    root.rmdir()
    assert not left, f"temporary directories left behind: {left}"


@pytest.fixture(params=["all", "namespaces+uid", "landlock"])
def layers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with all layers, then with only some, to show each one holds by itself."""
    assert CAPS is not None
    caps = CAPS
    if request.param == "namespaces+uid":
        if not (caps.namespaces and caps.root):
            pytest.skip("namespaces or root not available here")
        caps = dataclasses.replace(caps, landlock_abi=0)
    elif request.param == "landlock":
        if caps.landlock_abi < 4:
            pytest.skip("Landlock with network rules (ABI >= 4) not available here")
        caps = dataclasses.replace(caps, namespaces=())
    monkeypatch.setattr(sandbox, "_CAPS", caps)
    return str(request.param)


# ----------------------------------------------------------------------------- ordinary code


def test_runs_code_with_stdin_and_extra_files() -> None:
    res = run_python(
        "import sys, helper\nprint(helper.VALUE, sys.stdin.read().upper())\n",
        stdin="abc",
        extra_files={"helper.py": "VALUE = 42\n"},
    )
    assert res.ok and res.error is None and res.exit_code == 0
    assert res.stdout == "42 ABC\n"
    assert "rlimits" in res.isolation and "audit-hook" in res.isolation


def test_exit_code_and_exception_are_errors() -> None:
    res = run_python("import sys\nprint('partial')\nsys.exit(3)")
    assert not res.ok and res.exit_code == 3 and res.error == "exit code 3"
    assert res.stdout == "partial\n"
    res = run_python("raise KeyError('boom')")
    assert not res.ok and res.exit_code == 1 and "KeyError" in (res.error or "")


def test_cwd_and_home_are_a_fresh_private_directory() -> None:
    code = "import os\nopen('out.txt', 'w').write('x')\nprint(os.getcwd() == os.environ['HOME'], sorted(os.listdir('.')))"
    first, second = run_python(code), run_python(code)
    assert first.ok and second.ok
    assert first.stdout == second.stdout == "True ['main.py', 'out.txt']\n"


def test_bad_arguments_raise_value_error() -> None:
    for name in ("../escape.py", "/abs/path.py", "main.py"):
        with pytest.raises(ValueError):
            run_python("pass", extra_files={name: ""})
    with pytest.raises(ValueError):
        run_python("pass", timeout_s=0)


def test_setup_failure_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sandbox._interpreter()
    monkeypatch.setattr(sandbox, "_interpreter_roots", lambda: [os.path.dirname(os.path.dirname(real))])
    monkeypatch.setattr(sandbox, "_interpreter", lambda: real + "-missing")
    res = run_python("print('never runs')")
    assert not res.ok and res.stdout == ""
    assert res.error is not None and res.error.startswith("sandbox setup failed: FileNotFoundError")


def _open_pipes() -> set[str]:
    # Pipes only: sockets and files of other tests' background threads come and go.
    pipes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("pipe:"):
            pipes.add(f"{fd}->{target}")
    return pipes


def test_no_file_descriptors_leak() -> None:
    run_python("pass")  # warm-up: the one-time capability probe
    before = _open_pipes()
    for code in ("print(1)", "while True: pass", "import sys; sys.stdout.write('x' * 10**6)"):
        run_python(code, timeout_s=0.5, max_output_bytes=1000)
    assert _open_pipes() == before


def test_concurrent_runs_are_independent() -> None:
    out: dict[int, sandbox.SandboxResult] = {}

    def one(i: int) -> None:
        out[i] = run_python(f"import os, time\ntime.sleep(0.3)\nprint({i}, os.getcwd())")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(out[i].ok and out[i].stdout.startswith(f"{i} ") for i in range(4))
    assert len({out[i].stdout.split()[1] for i in range(4)}) == 4


# ----------------------------------------------------------------------------- hostile code


def test_endless_loop_times_out_and_kills_children(marker: str) -> None:
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'while True: pass', '{marker}'])\n"
        "while True:\n    pass\n"
    )
    res = run_python(code, timeout_s=1.5)
    assert res.timed_out and not res.ok
    assert res.error == "timeout after 1.5s"
    assert_no_leftovers(marker)


def test_cpu_limit() -> None:
    res = run_python("while True:\n    pass\n", timeout_s=30, cpu_s=1)
    assert not res.ok and not res.timed_out
    assert res.error == "cpu time limit exceeded"


def test_huge_allocation_hits_the_memory_limit() -> None:
    res = run_python("x = bytearray(4 * 1024**3)\nprint('allocated')", memory_mb=256)
    assert not res.ok and res.error == "memory limit exceeded"
    assert "allocated" not in res.stdout


def test_fork_loop_is_bounded(marker: str) -> None:
    code = (
        "import os, sys\n"
        "ok = 0\n"
        "for _ in range(300):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as exc:\n"
        "        print('fork refused:', exc)\n"
        "        break\n"
        "    if pid == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', '{marker}'])\n"
        "    ok += 1\n"
        "print('forked', ok)\n"
    )
    res = run_python(code, timeout_s=20, max_procs=12)
    assert res.ok, res.stderr
    assert "fork refused" in res.stdout
    forked = int(res.stdout.split("forked")[1])
    assert forked < 12
    assert_no_leftovers(marker)


def test_fork_bomb_is_bounded_and_cleaned_up(marker: str) -> None:
    # The bomb re-execs itself once so that every forked copy carries the marker in its cmdline.
    bomb = "import os\\nwhile True:\\n    try:\\n        os.fork()\\n    except OSError:\\n        pass\\n"
    code = f"import os, sys\nos.execv(sys.executable, [sys.executable, '-c', '{bomb}', '{marker}'])\n"
    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, len(marker_pids(marker)))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        res = run_python(code, timeout_s=2, max_procs=16)
    finally:
        done.set()
        watcher.join()
    assert res.timed_out and res.error == "timeout after 2s"
    assert 0 < peak <= 16
    assert_no_leftovers(marker)


def test_processes_that_escape_the_process_group_are_killed(marker: str) -> None:
    code = (
        "import ctypes, os, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # clear the parent-death signal\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', '{marker}'])\n"
        "    os._exit(0)\n"
        "print('parent done')\n"
    )
    res = run_python(code, timeout_s=10)
    assert res.ok and res.stdout == "parent done\n"
    assert_no_leftovers(marker)


def test_closing_stdout_does_not_end_supervision(marker: str) -> None:
    code = f"import os, time\nos.close(1)\nos.close(2)\ntime.sleep(60)  # {marker}"
    res = run_python(code, timeout_s=1)
    assert res.timed_out


def test_no_network(layers: str) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    code = f"""
import ctypes, socket, struct
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print("python connect: CONNECTED")
except OSError as exc:
    print("python connect refused:", exc)
# the same through libc, below the audit hook: only the kernel-side layers can stop it
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.socket(2, 1, 0)
addr = struct.pack("<HH4s8x", 2, socket.htons({port}), bytes([127, 0, 0, 1]))
rc = libc.connect(fd, addr, len(addr))
print("libc connect:", "CONNECTED" if rc == 0 else "refused errno %d" % ctypes.get_errno())
"""
    try:
        res = run_python(code, timeout_s=10)
        with pytest.raises(socket.timeout):
            conn, _ = server.accept()
            conn.close()
    finally:
        server.close()
    assert res.ok, res.stderr
    assert "CONNECTED" not in res.stdout
    assert "python connect refused" in res.stdout and "libc connect: refused" in res.stdout


def test_no_writes_outside_the_temp_dir(layers: str, tmp_path: Path, marker: str) -> None:
    tmp_path.chmod(0o777)  # even a world-writable directory must stay untouched
    targets = [
        tmp_path / f"{marker}.txt",
        Path("/tmp") / f"{marker}.txt",
        Path("/var/tmp") / f"{marker}.txt",
        Path("/dev/shm") / f"{marker}.txt",
        REPO / f"{marker}.txt",
        Path(sys.executable).resolve().parent / f"{marker}.txt",
    ]
    code = "import sys\nopen('inside.txt', 'w').write('fine')\nprint('inside ok')\n"
    for t in targets:
        code += (
            f"try:\n    open({str(t)!r}, 'w').write('pwned')\n    print('WROTE', {str(t)!r})\n"
            f"except OSError as exc:\n    print('refused', type(exc).__name__)\n"
        )
    res = run_python(code, timeout_s=10)
    assert res.ok, res.stderr
    assert "inside ok" in res.stdout and "WROTE" not in res.stdout
    assert res.stdout.count("refused") == len(targets)
    for t in targets:
        assert not t.exists(), f"sandbox wrote {t}"


def test_caller_environment_is_invisible(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"sk-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("E3ORCH_TEST_SECRET", secret)
    code = f"""
import os
print(sorted(os.environ))
print(os.environ.get("E3ORCH_TEST_SECRET"))
for path in ("/proc/{os.getpid()}/environ", "/proc/1/environ", "/proc/self/environ"):
    try:
        print(open(path, "rb").read())
    except OSError as exc:
        print("unreadable", path, type(exc).__name__)
"""
    res = run_python(code)
    assert res.ok, res.stderr
    assert secret not in res.stdout and secret not in res.stderr
    assert res.stdout.splitlines()[0] == "['HOME', 'LANG', 'PATH', 'TMPDIR']"


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_huge_output_is_capped(stream: str) -> None:
    code = f"import sys\nchunk = 'x' * 1_000_000\nfor _ in range(200):\n    sys.{stream}.write(chunk)\n"
    res = run_python(code, timeout_s=60, max_output_bytes=50_000)
    assert res.truncated and not res.timed_out and not res.ok
    assert res.error == "output truncated at 50000 bytes (process killed)"
    assert len(getattr(res, stream)) == 50_000


def test_isolation_layers_reported_on_this_machine() -> None:
    res = run_python("pass")
    assert CAPS is not None
    if CAPS.root:
        assert "uid" in res.isolation or not CAPS.namespaces
    if CAPS.namespaces:
        assert "namespaces" in res.isolation
    if CAPS.landlock_abi:
        assert "landlock" in res.isolation


# ----------------------------------------------------------------------------- the python executor


def test_extract_code_prefers_python_fences() -> None:
    from e3orch.executors.python_sandbox import extract_code

    assert extract_code("print(1)") == "print(1)"
    assert extract_code("Run:\n```python\nx = 1\n```\nand\n```py\nprint(x)\n```\n") == "x = 1\n\nprint(x)\n"
    assert extract_code("```\nprint(2)\n```") == "print(2)\n"
    assert extract_code("```bash\nls\n```\n```python\nprint(3)\n```") == "print(3)\n"


def test_deps_line_goes_after_docstring_and_future_imports() -> None:
    from e3orch.executors.python_sandbox import with_deps

    code = '"""Doc."""\nfrom __future__ import annotations\nprint(DEPS)\n'
    out = with_deps(code, {"s1": "x'y"})
    assert out.splitlines()[:3] == ['"""Doc."""', "from __future__ import annotations", "DEPS = {'s1': \"x'y\"}"]
    res = run_python(out)
    assert res.ok and res.stdout == "{'s1': \"x'y\"}\n"
    assert with_deps("print(1)", {}) == "DEPS = {}\nprint(1)"


def test_python_executor_runs_calls_concurrently() -> None:
    import asyncio

    from e3orch.executors.base import ExecutorSpec, SubtaskRequest, build_pool

    spec = ExecutorSpec.model_validate({"name": "py", "kind": "python", "timeout_s": 20})
    ex = build_pool([spec])["py"]
    code = "import time\nstart = time.time()\ntime.sleep(1)\nprint(start, time.time())"

    async def go() -> list:  # type: ignore[type-arg]
        return await asyncio.gather(*(ex.run(SubtaskRequest("t", f"s{i}", code)) for i in range(3)))

    results = asyncio.run(go())
    assert all(r.ok for r in results), [r.error for r in results]
    spans = [tuple(map(float, r.output.split())) for r in results]
    assert max(s for s, _ in spans) < min(e for _, e in spans)  # all three were running at once
    assert all(r.cost == 0.0 and r.input_tokens > 0 for r in results)  # price 0 in this spec


def test_python_executor_failure_and_options() -> None:
    import asyncio

    from e3orch.executors.base import ConfigError, ExecutorSpec, SubtaskRequest, build_pool

    spec = ExecutorSpec.model_validate({"name": "py", "kind": "python", "timeout_s": 1})
    ex = build_pool([spec])["py"]
    res = asyncio.run(ex.run(SubtaskRequest("t", "s1", "print('started')\nwhile True:\n    pass")))
    assert not res.ok and res.error == "timeout after 1s" and res.output == "started"
    with pytest.raises(ConfigError, match="unknown option"):
        build_pool([ExecutorSpec.model_validate({"name": "py", "kind": "python", "timeout": 1})])
