"""Sandbox containment: every hostile program ends with its specific code."""

import os
import socket
import time

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
