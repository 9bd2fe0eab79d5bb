"""Sandbox containment: every hostile program ends with its specific code."""

import os
import socket
import stat
import tempfile
import threading
import time
import uuid

import pytest

from agentic_rl.envs.sandbox import Sandbox, _sandbox_pids
from agentic_rl.types import FailureCode


@pytest.fixture()
def sandbox():
  with Sandbox() as sb:
    yield sb


def _nothing_left(sb: Sandbox) -> bool:
  return sb.uid is None or not _sandbox_pids(sb.uid, b"\0unused\0")


def test_runs_code_in_its_own_directory(sandbox):
  sandbox.write_file("data/in.txt", "41")
  r = sandbox.run(
    code="import os\n"
    "n = int(open('data/in.txt').read())\n"
    "open('out.txt', 'w').write(str(n + 1))\n"
    "print(os.getcwd(), os.environ.get('HOME'), sorted(os.environ))"
  )
  assert (r.failure, r.returncode, r.timed_out, r.truncated) == (
    None,
    0,
    False,
    False,
  )
  assert r.ok
  cwd, home, env = r.stdout.split(" ", 2)
  assert cwd == home == str(sandbox.root)
  assert "PYTHONPATH" not in env and "VIRTUAL_ENV" not in env
  assert sandbox.read_file("out.txt") == "42"
  root = sandbox.root
  sandbox.close()
  assert not root.exists()
  assert sandbox.run(code="pass").failure == FailureCode.TOOL_ERROR


def test_non_zero_exit_is_not_a_sandbox_failure(sandbox):
  r = sandbox.run(code="import sys; print('x'); sys.exit(3)")
  assert (r.failure, r.returncode, r.stdout) == (None, 3, "x\n")
  r = sandbox.run(code="def (")
  assert r.failure is None and "SyntaxError" in r.stderr


def test_infinite_loop_times_out(sandbox):
  start = time.monotonic()
  r = sandbox.run(code="while True: pass", timeout_s=0.5)
  assert r.failure == FailureCode.TIMEOUT and r.timed_out
  assert time.monotonic() - start < 2.0
  assert _nothing_left(sandbox)


def test_cpu_limit_is_a_timeout(sandbox):
  r = sandbox.run(code="while True: pass", timeout_s=10, cpu_s=1)
  assert r.failure == FailureCode.TIMEOUT and not r.timed_out
  assert "CPU time" in r.error and r.seconds < 5


def test_fork_is_forbidden_by_default(sandbox):
  r = sandbox.run(code="import os\nwhile True:\n  os.fork()")
  assert r.failure == FailureCode.FORBIDDEN
  assert "os.fork" in r.error
  r = sandbox.run(code="import subprocess; subprocess.run(['true'])")
  assert r.failure == FailureCode.FORBIDDEN


def test_fork_bomb_is_capped_and_killed():
  bomb = (
    "import os\nwhile True:\n  try:\n    os.fork()\n  except OSError:\n    pass"
  )
  with Sandbox(allow_subprocess=True) as sb:
    start = time.monotonic()
    r = sb.run(code=bomb, timeout_s=1.0, nproc=8)
    assert r.failure == FailureCode.TIMEOUT and r.timed_out
    assert time.monotonic() - start < 4.0
    assert _nothing_left(sb)
    shell_bomb = "f(){ f|f& }; while true; do f; done"
    r = sb.run(argv=["sh", "-c", shell_bomb], timeout_s=1.0, nproc=8)
    # The shell either dies of "Cannot fork" or runs into the timeout;
    # either way the cap held and the whole tree is gone.
    if r.failure is None:
      assert "Cannot fork" in r.stderr and r.returncode != 0
    else:
      assert r.failure == FailureCode.TIMEOUT
    assert _nothing_left(sb)
    # The machine is still fine.
    assert sb.run(code="print(1)").stdout == "1\n"


def test_memory_bomb_is_a_clear_tool_error(sandbox):
  r = sandbox.run(code="x = bytearray(4 * 1024**3)", memory_mb=256)
  assert r.failure == FailureCode.TOOL_ERROR
  assert "memory limit of 256 MB" in r.error
  r = sandbox.run(
    code="xs = []\nwhile True:\n  xs.append(' ' * 10**6)", memory_mb=256
  )
  assert r.failure == FailureCode.TOOL_ERROR and "memory" in r.error


def test_huge_output_is_truncated(sandbox):
  r = sandbox.run(
    code="import sys\nprint('x' * 5_000_000)\nsys.stderr.write('e' * 99999)",
    max_output_bytes=1000,
  )
  assert r.failure is None and r.truncated
  assert r.stdout.startswith("x" * 1000) and len(r.stdout) < 1100
  assert "output truncated" in r.stdout and "output truncated" in r.stderr


def test_network_is_forbidden(sandbox):
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen()
  server.settimeout(0.3)
  port = server.getsockname()[1]
  connect = (
    f"import socket; s = socket.socket(); s.connect(('127.0.0.1', {port}))"
  )
  try:
    r = sandbox.run(code=connect)
    assert r.failure == FailureCode.FORBIDDEN and "network" in r.error
    if sandbox.network_namespace:
      # The kernel layer alone (argv: no Python guard) also cuts the network.
      r = sandbox.run(argv=["python3", "-c", connect + "; print('in')"])
      assert r.returncode != 0 and "in" not in r.stdout
      assert "unreachable" in r.stderr or "refused" in r.stderr
    with pytest.raises(socket.timeout):
      server.accept()
  finally:
    server.close()


def test_writing_outside_is_forbidden(sandbox, tmp_path):
  target = tmp_path / "escape.txt"
  os.chmod(tmp_path, 0o777)
  for code in (
    f"open({str(target)!r}, 'w').write('x')",
    f"import os; os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)",
    f"import os; os.symlink({str(target)!r}, 'link'); open('link', 'w')",
    f"import os; os.mkdir({str(tmp_path / 'd')!r})",
    f"import pathlib; pathlib.Path({str(target)!r}).touch()",
  ):
    r = sandbox.run(code=code)
    assert r.failure == FailureCode.FORBIDDEN, (code, r)
    assert "outside the sandbox" in r.error
  assert list(tmp_path.iterdir()) == []
  # Reading outside and writing inside stay allowed.
  r = sandbox.run(code="open('/etc/hostname').read(); open('ok', 'w')")
  assert r.failure is None and r.returncode == 0


def test_unprivileged_uid_blocks_writes_for_any_program(sandbox):
  if sandbox.uid is None:
    pytest.skip("not root: no private uid to drop to")
  r = sandbox.run(argv=["sh", "-c", "echo x > /etc/sandbox_escape"])
  assert r.returncode != 0 and "Permission denied" in r.stderr
  assert not os.path.exists("/etc/sandbox_escape")


def _dir_fd_write(name):
  # A write the Python guard cannot see: the audit event names only the
  # relative path, which resolves inside the sandbox.
  return (
    "import os\nfd = os.open('/tmp', os.O_RDONLY)\n"
    f"f = os.open({name!r}, os.O_WRONLY | os.O_CREAT, dir_fd=fd)\n"
    "os.write(f, b'x')\nprint('wrote')\n"
  )


def test_private_tmp_keeps_writes_past_the_guard_off_the_host(sandbox):
  if not sandbox.private_dirs:
    pytest.skip("no mount namespace here (needs root and unshare --mount)")
  assert "/tmp" in sandbox.isolation["private_tmp"]
  name = f"agentic_rl_escape_{uuid.uuid4().hex}"
  # Without the layer the write really lands in the host's /tmp ...
  with Sandbox(private_tmp=False) as open_tmp:
    try:
      r = open_tmp.run(code=_dir_fd_write(name))
      assert r.failure is None and "wrote" in r.stdout, r
      assert os.path.exists(f"/tmp/{name}")
    finally:
      if os.path.exists(f"/tmp/{name}"):
        os.remove(f"/tmp/{name}")
  # ... with it, in a tmpfs that dies with the child.
  r = sandbox.run(code=_dir_fd_write(name))
  assert r.failure is None and "wrote" in r.stdout, r
  assert not os.path.exists(f"/tmp/{name}")
  # Any program, not just Python: writes to every covered directory stay
  # private, the host's files there are out of sight, and the sandbox
  # directory itself is the real one.
  with tempfile.NamedTemporaryFile(dir="/tmp", prefix="agentic_rl_") as host:
    os.chmod(host.name, 0o644)
    writes = "; ".join(f"echo x > {d}/{name}" for d in sandbox.private_dirs)
    r = sandbox.run(argv=["sh", "-c", f"{writes}; ls -a /tmp; echo y > mine"])
    assert r.failure is None and r.returncode == 0, r
    assert os.path.basename(host.name) not in r.stdout
    assert name in r.stdout
  for d in sandbox.private_dirs:
    assert not os.path.exists(f"{d}/{name}"), d
  assert sandbox.read_file("mine") == "y\n"


def test_bad_requests_are_tool_errors(sandbox):
  assert sandbox.run().failure == FailureCode.TOOL_ERROR
  both = sandbox.run(code="pass", argv=["true"])
  assert both.failure == FailureCode.TOOL_ERROR
  missing = sandbox.run(argv=["definitely-not-a-program-xyz"])
  assert missing.failure == FailureCode.TOOL_ERROR
  assert "cannot execute" in missing.error
  with pytest.raises(ValueError):
    sandbox.path("../outside")
  assert sandbox.isolation["python_guard"]


def test_without_private_uid_the_guard_and_sweep_still_work():
  with Sandbox(drop_privileges=False, isolate_network=False) as sb:
    assert sb.uid is None
    r = sb.run(code="while True: pass", timeout_s=0.5)
    assert r.failure == FailureCode.TIMEOUT
    r = sb.run(code="open('/tmp/agentic_rl_escape', 'w')")
    assert r.failure == FailureCode.FORBIDDEN
    assert not os.path.exists("/tmp/agentic_rl_escape")
  if os.geteuid() == 0:
    with pytest.raises(ValueError, match="private uid"):
      Sandbox(drop_privileges=False, allow_subprocess=True)


def _within(seconds, fn):
  """Runs fn in a thread; fails (rather than hangs) if it blocks."""
  out = {}

  def target():
    try:
      out["value"] = fn()
    except BaseException as e:  # noqa: BLE001 - handed to the test
      out["error"] = e

  thread = threading.Thread(target=target, daemon=True)
  thread.start()
  thread.join(seconds)
  assert not thread.is_alive(), f"still blocked after {seconds} s"
  return out


def test_guard_survives_rebinding_what_user_code_can_reach(tmp_path):
  target = tmp_path / "escape.txt"
  os.chmod(tmp_path, 0o777)
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen()
  server.settimeout(0.3)
  port = server.getsockname()[1]
  unhook = (
    "import builtins, os, os.path, posixpath, socket, sys\n"
    "m = sys.modules['__main__']\n"
    "m.inside = lambda p: True\n"
    "m.NETWORK = m.MUTATING = frozenset()\n"
    "m.report = lambda *a: None\n"
    "os.path.realpath = posixpath.abspath = lambda p: os.getcwd()\n"
    "builtins.len = lambda x: 0\n"
    "builtins.any = lambda x: False\n"
    "f = sys._getframe()\n"
    "while f is not None:\n"
    "  for k in [k for k in f.f_globals if k not in ('os', 'socket', 'f')]:\n"
    "    f.f_globals[k] = None\n"
    "  f = f.f_back\n"
  )
  attempts = (
    f"open({str(target)!r}, 'w').write('x')",
    f"os.mkdir({str(tmp_path / 'd')!r})",
    f"socket.socket().connect(('127.0.0.1', {port}))",
  )
  try:
    # Also without the kernel layers, where the guard is all there is.
    for kwargs in ({}, {"drop_privileges": False, "isolate_network": False}):
      with Sandbox(**kwargs) as sb:
        for attempt in attempts:
          r = sb.run(code=unhook + attempt)
          assert r.failure == FailureCode.FORBIDDEN, (kwargs, attempt, r)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(socket.timeout):
      server.accept()
  finally:
    server.close()


def test_guard_cannot_be_reached_through_the_collector(sandbox):
  for code in (
    "import gc; gc.get_objects()",
    "import gc; gc.get_referrers(print)",
    "def f(): pass\nf.__code__ = (lambda: 1).__code__",
  ):
    r = sandbox.run(code=code)
    assert r.failure == FailureCode.FORBIDDEN, (code, r)


def test_fifos_and_device_nodes_are_forbidden(sandbox):
  for code in (
    "import os; os.mkfifo('f')",
    "import os, stat; os.mknod('f', stat.S_IFIFO | 0o600)",
    "import posix; posix.mkfifo('f')",
  ):
    r = sandbox.run(code=code)
    assert r.failure == FailureCode.FORBIDDEN, (code, r)
    assert "FIFO" in r.error
  assert not (sandbox.root / "f").exists()


def test_host_file_access_refuses_special_files_without_blocking(sandbox):
  # What code that got past the guard can leave behind: a FIFO where a file
  # was (opening it would block forever), a symlink out, a directory.
  sandbox.write_file("ok.py", "x = 1\n")
  os.mkfifo(sandbox.root / "fifo.py")
  os.symlink("/etc/hostname", sandbox.root / "out.py")
  os.symlink("ok.py", sandbox.root / "alias.py")
  os.mkdir(sandbox.root / "dir.py")
  for name in ("fifo.py", "out.py", "dir.py"):
    for op in (
      lambda name=name: sandbox.read_file(name),
      lambda name=name: sandbox.write_file(name, "y = 2\n"),
    ):
      out = _within(5, op)
      assert isinstance(out.get("error"), ValueError), (name, out)
  assert stat.S_ISFIFO(os.lstat(sandbox.root / "fifo.py").st_mode)
  # Regular files, also through a symlink that stays inside, still work.
  assert sandbox.read_file("alias.py") == "x = 1\n"
  sandbox.write_file("alias.py", "z = 3\n")
  assert sandbox.read_file("ok.py") == "z = 3\n"
  with pytest.raises(FileNotFoundError):
    sandbox.read_file("missing.py")
