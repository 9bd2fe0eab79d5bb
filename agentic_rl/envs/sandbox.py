"""A sandbox for code-running tools: one temporary directory per episode.

`Sandbox.run` starts a child process (Python `code`, or an `argv` command) in
the sandbox directory and returns a `SandboxResult`. Containment is layered;
`Sandbox.isolation` reports which layers are in effect on this machine.

Kernel layers (apply to `code` and `argv`):

* Resource limits set in the child before it runs anything: RLIMIT_CPU (CPU
  seconds), RLIMIT_AS (memory), RLIMIT_NPROC (processes, which caps fork
  bombs), RLIMIT_FSIZE (largest file written), RLIMIT_NOFILE, no core dumps.
* Its own session and process group, SIGKILLed on the wall-clock timeout;
  after every run all processes left behind are swept (by uid when privileges
  were dropped, else by a per-run token in their environment) so nothing
  outlives the call, whatever it forked or daemonized.
* Unprivileged uid (when we run as root): the child switches to a fresh uid
  unique to this sandbox, which owns the directory. RLIMIT_NPROC only binds
  non-root users, and a private uid makes the cap per sandbox and keeps the
  child out of everything not world-writable. Without root the cap is our
  own process count plus `nproc`; as root without a private uid nothing
  caps processes, so `allow_subprocess` is refused there.
* No network (when `unshare --net` works, i.e. as root on Linux): the child
  runs in a fresh network namespace with no interfaces up, so even 127.0.0.1
  is unreachable.
* Private temporary directories (when `unshare --mount` works, i.e. as
  root on Linux): the child runs in its own mount namespace with a fresh
  tmpfs (64 MiB, 4096 inodes) over each world-writable directory (/tmp,
  /var/tmp, /dev/shm, /run/lock, those that exist), its own sandbox
  directory bound back in place. What it writes there vanishes with it and
  never reaches the host, and the host's files there are out of its sight;
  `private_dirs` lists the covered ones.
* A scrubbed environment (PATH, HOME/TMPDIR = the sandbox, LANG) and stdin
  from /dev/null.

Python guard (applies to `code` only): before the user code runs, an audit
hook (PEP 578) is installed that ends the process with a FORBIDDEN report on
any socket creation or name lookup, any open-for-writing or path mutation
(remove, rename, mkdir, chmod, link, ...) outside the sandbox directory
(/dev/null excepted), creating a FIFO or device node (os.mkfifo/os.mknod are
replaced, as CPython audits neither), any use of ctypes, walking the garbage
collector or replacing a function's code (the ways to reach the guard
itself), and, unless `allow_subprocess`, any fork/exec/spawn. This is what
turns a violation into the FORBIDDEN code with a clear message rather than an
opaque errno; without private temporary directories it is the only write
guard for world-writable places such as /tmp. The guard keeps its state in
closures and calls only functions it bound before user code ran, and the
launcher deletes its own globals, so rebinding names
(`sys.modules['__main__']`, `os.path`, `builtins`) does not switch it off.

The Python guard is defence in depth, not the boundary: hostile code can
still get past it (C extensions, a reimported `posix`, `dir_fd` arguments the
audit events do not show, a path object whose `__fspath__` changes its
answer). The kernel layers above (rlimits, the private uid, the network
namespace, the private temporary directories) are what contain such code;
`isolation` says which of them this machine provides.

Host-side file access (`read_file`, `write_file`) never blocks and never
leaves the sandbox: code in the sandbox may leave a FIFO, device node or
symlink where a file was, so paths are resolved inside the directory, files
are opened with O_NONBLOCK and O_NOFOLLOW, and anything but a regular file
raises ValueError (as does a path that escapes).

Failure codes on `SandboxResult.failure` (a non-zero exit by itself is *not*
a failure: failing tests exit 1, and the caller judges that):

* TIMEOUT: wall clock exceeded (`timed_out`), or the CPU limit (SIGXCPU).
* FORBIDDEN: the Python guard stopped a forbidden operation.
* TOOL_ERROR: memory limit exceeded, file-size limit exceeded, killed by
  another signal, or the sandbox itself could not start the child.

Output beyond `max_output_bytes` per stream is read and discarded (so a
chatty child cannot block on a full pipe or fill our memory); `truncated`
says so and the kept text ends with a note.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
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
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentic_rl.types import FailureCode

# Exit statuses the launcher uses to report sandbox events (with a message
# on the status pipe).
_EXIT_FORBIDDEN = 86
_EXIT_MEMORY = 87
_EXIT_SETUP = 88

_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"

# Size of each private tmpfs (see `Sandbox.private_dirs`).
_PRIVATE_DIR_MB = 64

# Runs in the child (`python -I -S -c _LAUNCHER`), config as JSON on stdin.
# Kept free of f-strings and third-party imports so any Python 3 runs it.
#
# The guard keeps all its state in closures made by `_install`, and binds
# every function it calls there (C builtins, not the `os.path` or `builtins`
# names user code can rebind). Afterwards the launcher deletes its globals
# and gives user code a fresh `__main__`, so nothing user code can reach by
# name switches the guard off.
_LAUNCHER = r"""
import json, os, posix, resource, sys
cfg = json.loads(sys.stdin.read())
os.set_inheritable(cfg["status_fd"], False)


def _reporter(status_fd, streams, write, exit_):
  # Unbound C methods: an instance attribute named `flush` cannot intercept.
  flushes = [(type(s).flush, s) for s in streams]
  failed = BaseException

  def report(code, message):
    for flush, stream in flushes:
      try:
        flush(stream)
      except failed:
        pass
    try:
      write(status_fd, message.encode("utf-8", "replace")[:4000])
    except failed:
      pass
    exit_(code)

  return report


report = _reporter(cfg["status_fd"], (sys.stdout, sys.stderr), os.write,
                   os._exit)


def _private_dirs(dirs, root, size_mb, host_namespace):
  # Runs as root in this process's own mount namespace (`unshare --mount`):
  # a fresh tmpfs over each world-writable directory, so what the child
  # writes there dies with it and the host's files there are out of sight.
  # A sandbox directory under one of them is bound back at its own path
  # from our working directory, which is still the original one.
  if os.stat("/proc/self/ns/mnt").st_ino == host_namespace:
    raise OSError("not in a mount namespace of its own; refusing to mount")
  import ctypes
  libc = ctypes.CDLL(None, use_errno=True)

  def mount(source, target, fstype, flags, data):
    if libc.mount(source, target.encode(), fstype, flags, data) != 0:
      err = ctypes.get_errno()
      raise OSError(err, "mount on %s: %s" % (target, os.strerror(err)))

  ms_nosuid, ms_nodev, ms_bind, ms_rec, ms_private = 2, 4, 4096, 16384, 262144
  mount(None, "/", None, ms_rec | ms_private, None)
  options = ("size=%dm,nr_inodes=4096,mode=1777" % size_mb).encode()
  for path in dirs:
    mount(b"tmpfs", path, b"tmpfs", ms_nosuid | ms_nodev, options)
  for path in dirs:
    if root.startswith(path + "/"):
      os.makedirs(root)
      mount(b"/proc/self/cwd", root, None, ms_bind, None)
      break
  for name in [m for m in sys.modules if m.split(".")[0] in ("ctypes",
                                                            "_ctypes")]:
    del sys.modules[name]


try:
  if cfg["private_dirs"]:
    _private_dirs(cfg["private_dirs"], cfg["root"], cfg["private_dir_mb"],
                  cfg["host_namespace"])
  null = os.open(os.devnull, os.O_RDONLY)
  os.dup2(null, 0)
  os.close(null)
  for name, value in cfg["limits"].items():
    res = getattr(resource, name)
    soft, hard = value
    resource.setrlimit(res, (soft, hard))
  if cfg["uid"] is not None:
    os.setgroups([])
    os.setgid(cfg["gid"])
    os.setuid(cfg["uid"])
  os.chdir(cfg["root"])
except Exception as e:
  report(88, "sandbox setup failed: %s: %s" % (type(e).__name__, e))

if cfg["argv"] is not None:
  try:
    os.execvp(cfg["argv"][0], cfg["argv"])
  except Exception as e:
    report(88, "cannot execute %r: %s" % (cfg["argv"][0], e))


def _install(root, allow_subprocess, report):
  lstat, readlink, getcwd, fspath = os.lstat, os.readlink, os.getcwd, os.fspath
  kind, subclass, text, data, integer = type, issubclass, str, bytes, int
  size, show, failed = len, repr, BaseException
  decode = bytes.decode
  write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
  network = frozenset((
    "socket.__new__", "socket.connect", "socket.bind", "socket.sendto",
    "socket.sendmsg", "socket.getaddrinfo", "socket.gethostbyname",
    "socket.gethostbyname_ex", "socket.gethostbyaddr", "socket.getnameinfo",
  ))
  process = frozenset((
    "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn",
    "os.spawn", "subprocess.Popen", "pty.spawn",
  ))
  # Ways to reach the guard's own function and closure cells.
  introspection = frozenset(("gc.get_objects", "gc.get_referrers",
                             "gc.get_referents"))
  # Raised by the os.mkfifo/os.mknod stand-ins below (CPython audits
  # neither): a FIFO or device node would block or mislead host-side reads.
  special = frozenset(("os.mkfifo", "os.mknod"))
  # Path arguments (by position) that an event creates or changes.
  mutating = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.chmod": (0,),
    "os.chown": (0,), "os.truncate": (0,), "os.utime": (0,),
    "os.chflags": (0,), "os.lchflags": (0,), "os.lchmod": (0,),
    "os.setxattr": (0,), "os.removexattr": (0,), "os.rename": (0, 1),
    "os.link": (0, 1), "os.symlink": (1,), "shutil.rmtree": (0,),
  }

  def as_text(path):
    # The path a C call sees, without running code of str/bytes subclasses.
    if subclass(kind(path), text):
      return text.__str__(path)
    if subclass(kind(path), data):
      return decode(path, "utf-8", "surrogateescape")
    try:
      path = fspath(path)  # a path object: runs its __fspath__
    except failed:
      return None
    return as_text(path) if subclass(kind(path), (text, data)) else None

  def resolve(path):
    # os.path.realpath, from bound primitives only.
    if "\0" in path:
      return None
    if not path.startswith("/"):
      try:
        path = getcwd() + "/" + path
      except failed:
        return None
    pending = path.split("/")[::-1]
    parts = []
    links = 0
    while pending:
      part = pending.pop()
      if part == "" or part == ".":
        continue
      if part == "..":
        if parts:
          parts.pop()
        continue
      here = "/" + "/".join(parts + [part])
      try:
        mode = lstat(here).st_mode
      except failed:
        parts.append(part)  # missing: taken literally, like realpath
        continue
      if mode & 0o170000 == 0o120000:
        links += 1
        try:
          target = readlink(here)
        except failed:
          return None
        if links > 40:
          return None
        if target.startswith("/"):
          parts = []
        pending.extend(target.split("/")[::-1])
        continue
      parts.append(part)
    return "/" + "/".join(parts)

  def inside(path):
    if subclass(kind(path), integer):
      return True  # an already-open descriptor
    path = as_text(path)
    full = None if path is None else resolve(path)
    if full is None:
      return False
    return full == root or full.startswith(root + "/") or full == "/dev/null"

  def shown(path):
    return show(path) if subclass(kind(path), (text, data, integer)) else (
      "<path object>")

  def guard(event, args):
    if event == "open":
      path, mode, flags = args
      writing = (subclass(kind(flags), integer) and flags & write_flags) or (
        subclass(kind(mode), text)
        and ("w" in mode or "a" in mode or "x" in mode or "+" in mode))
      if writing and not inside(path):
        report(86, "writing outside the sandbox directory: %s" % shown(path))
    elif event in mutating:
      for i in mutating[event]:
        if i < size(args) and not inside(args[i]):
          report(86, "%s outside the sandbox directory: %s"
                 % (event, shown(args[i])))
    elif event in network:
      report(86, "network access is disabled in the sandbox (%s)" % event)
    elif event in special:
      report(86, "creating FIFOs and device nodes is disabled in the sandbox"
             " (%s)" % event)
    elif event.startswith("ctypes."):
      report(86, "ctypes is disabled in the sandbox (%s)" % event)
    elif event in introspection:
      report(86, "inspecting the garbage collector is disabled in the"
             " sandbox (%s)" % event)
    elif event == "object.__setattr__" and args[1] == "__code__":
      report(86, "replacing a function's code is disabled in the sandbox")
    elif event in process and not allow_subprocess:
      report(86, "starting processes is disabled in the sandbox (%s)" % event)

  def stand_in(name, audit):
    def refuse(*args, **kwargs):
      audit(name, args[:1])
      raise PermissionError("%s is disabled in the sandbox" % name)
    return refuse

  for name in ("mkfifo", "mknod"):
    refuse = stand_in("os." + name, sys.audit)
    setattr(os, name, refuse)
    setattr(posix, name, refuse)
  sys.addaudithook(guard)


sys.dont_write_bytecode = True
sys.path.insert(0, os.path.realpath(cfg["root"]))
code = compile(cfg["code"], "<sandbox>", "exec")
sys.argv = ["<sandbox>"]
main = type(sys)("__main__")
main.__builtins__ = __builtins__
sys.modules["__main__"] = main
# The guard's report closes over its own cells, not `report` above.
_install(os.path.realpath(cfg["root"]), cfg["allow_subprocess"],
         _reporter(cfg["status_fd"], (sys.stdout, sys.stderr), os.write,
                   os._exit))
for _name in ("cfg", "report", "_reporter", "_install", "_private_dirs",
              "name", "res", "soft", "hard", "value", "null", "e"):
  globals().pop(_name, None)
try:
  exec(code, main.__dict__)
except MemoryError:
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except BaseException:
      pass
  os._exit(87)
"""


@dataclasses.dataclass(frozen=True)
class SandboxResult:
  """The outcome of one `Sandbox.run`. `failure` is None on a clean run."""

  returncode: int | None
  stdout: str
  stderr: str
  failure: FailureCode | None = None
  error: str = ""
  timed_out: bool = False
  truncated: bool = False
  seconds: float = 0.0

  @property
  def ok(self) -> bool:
    """Ran to completion without a sandbox failure and exited 0."""
    return self.failure is None and self.returncode == 0


def _traversable(path: str) -> bool:
  """True if every directory above `path` lets any user through."""
  p = Path(os.path.realpath(path))
  for parent in [p, *p.parents]:
    try:
      mode = os.stat(parent).st_mode
    except OSError:
      return False
    if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
      return False
  return True


@functools.cache
def _interpreter_for_others() -> str | None:
  """A Python an unprivileged uid can run, with a readable standard library.

  Our own interpreter may live under a private home (e.g. pyenv in /root);
  then fall back to the system Python, which is enough for the launcher and
  standard-library code.
  """
  if _traversable(sys.executable) and _traversable(
    sysconfig.get_paths()["stdlib"]
  ):
    return sys.executable
  for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
    if os.path.exists(candidate) and _traversable(candidate):
      return candidate
  return None


@functools.cache
def _unshare_works(flag: str) -> bool:
  """Whether `unshare <flag>` can make that namespace here (root, Linux)."""
  unshare = shutil.which("unshare")
  if unshare is None:
    return False
  try:
    probe = subprocess.run(
      [unshare, flag, "true"], capture_output=True, timeout=10
    )
  except (OSError, subprocess.SubprocessError):
    return False
  return probe.returncode == 0


@functools.cache
def _mount_namespace() -> int | None:
  """This process's mount namespace (its inode), for the child to compare."""
  try:
    return os.stat("/proc/self/ns/mnt").st_ino
  except OSError:
    return None


_SHARED_DIR_CANDIDATES = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


@functools.cache
def _world_writable_dirs() -> tuple[str, ...]:
  """The usual world-writable directories of this machine, resolved."""
  found = []
  for candidate in _SHARED_DIR_CANDIDATES:
    path = os.path.realpath(candidate)
    try:
      mode = os.stat(path).st_mode
    except OSError:
      continue
    if stat.S_ISDIR(mode) and mode & 0o002 and path not in found:
      found.append(path)
  return tuple(found)


_uid_lock = threading.Lock()
_uid_counter = itertools.count()


def _fresh_uid() -> int:
  # Far above any real account; pid bits keep concurrent processes apart.
  with _uid_lock:
    n = next(_uid_counter)
  return 3_000_000 + ((os.getpid() & 0xFFFF) << 10) + (n & 0x3FF)


def _proc_uid(pid: str) -> int | None:
  """Real uid of a live process; None for zombies and vanished ones."""
  uid = None
  try:
    with open(f"/proc/{pid}/status") as f:
      for line in f:
        if line.startswith("State:") and line.split()[1] in ("Z", "X"):
          return None  # already dead, waiting to be reaped
        if line.startswith("Uid:"):
          uid = int(line.split()[1])
          break
  except (OSError, ValueError, IndexError):
    return None
  return uid


def _proc_has_token(pid: str, token: bytes) -> bool:
  try:
    with open(f"/proc/{pid}/environ", "rb") as f:
      return token in f.read()
  except OSError:
    return False


def _sandbox_pids(uid: int | None, token: bytes) -> list[int]:
  """Processes started by one sandbox run that are still alive."""
  me = os.getpid()
  found = []
  for entry in os.listdir("/proc"):
    if not entry.isdigit() or int(entry) == me:
      continue
    owner = _proc_uid(entry)
    if owner is None:
      continue
    if (uid is not None and owner == uid) or _proc_has_token(entry, token):
      found.append(int(entry))
  return found


def _kill_tree(pgid: int, uid: int | None, token: bytes) -> None:
  """SIGKILLs the process group and every straggler, until none is left."""
  for _ in range(50):
    try:
      os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
      pass
    pids = _sandbox_pids(uid, token)
    for pid in pids:
      try:
        os.kill(pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass
    if not pids:
      return
    time.sleep(0.01)


def _own_task_count() -> int:
  uid = os.getuid()
  count = 0
  for entry in os.listdir("/proc"):
    if entry.isdigit() and _proc_uid(entry) == uid:
      try:
        count += len(os.listdir(f"/proc/{entry}/task"))
      except OSError:
        pass
  return count


class _Stream:
  """Keeps the first `limit` bytes of a pipe and counts the rest."""

  def __init__(self, limit: int):
    self.limit = limit
    self.kept = bytearray()
    self.dropped = 0

  def feed(self, chunk: bytes) -> None:
    room = self.limit - len(self.kept)
    self.kept += chunk[: max(room, 0)]
    self.dropped += max(len(chunk) - max(room, 0), 0)

  def text(self) -> str:
    out = self.kept.decode("utf-8", errors="replace")
    if self.dropped:
      out += f"\n... [output truncated: {self.dropped} more bytes]"
    return out


class Sandbox:
  """A temporary directory plus a contained way to run code in it.

  Use as a context manager (or call `close`): the directory and everything
  in it are removed on exit. Runs are independent processes; several may run
  at once from different threads.
  """

  def __init__(
    self,
    isolate_network: bool = True,
    drop_privileges: bool = True,
    allow_subprocess: bool = False,
    private_tmp: bool = True,
    prefix: str = "agentic_rl_sandbox_",
  ):
    self.allow_subprocess = allow_subprocess
    python = _interpreter_for_others()
    self._privileged = (
      drop_privileges and os.geteuid() == 0 and python is not None
    )
    self.python = python if self._privileged else sys.executable
    self.uid = _fresh_uid() if self._privileged else None
    if allow_subprocess and os.geteuid() == 0 and self.uid is None:
      # RLIMIT_NPROC does not bind root, so nothing would cap a fork bomb.
      raise ValueError(
        "allow_subprocess as root needs a private uid (drop_privileges=True "
        "and a Python interpreter readable by other users)"
      )
    self.root = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    self.network_namespace = (
      isolate_network and os.geteuid() == 0 and _unshare_works("--net")
    )
    self.private_dirs: tuple[str, ...] = ()
    if private_tmp and os.geteuid() == 0 and _unshare_works("--mount"):
      # Never cover the directory our child's interpreter lives in.
      self.private_dirs = tuple(
        d
        for d in _world_writable_dirs()
        if not os.path.realpath(self.python).startswith(d + "/")
      )
    self._closed = False
    if self._privileged:
      os.chown(self.root, self.uid, self.uid)
    os.chmod(self.root, 0o700)

  @property
  def isolation(self) -> dict[str, Any]:
    """Which containment layers are in effect (see the module docstring)."""
    return {
      "unprivileged_uid": self.uid,
      "network_namespace": self.network_namespace,
      "private_tmp": list(self.private_dirs),
      "python_guard": True,
      "allow_subprocess": self.allow_subprocess,
      "python": self.python,
    }

  # -- files ------------------------------------------------------------------

  def path(self, relative: str) -> Path:
    """Resolves a path inside the sandbox; ValueError if it escapes."""
    full = (self.root / relative).resolve()
    if full != self.root and self.root not in full.parents:
      raise ValueError(f"path {relative!r} is outside the sandbox")
    return full

  def _open_regular(self, full: Path, flags: int) -> int:
    """A descriptor for the regular file `full`; never blocks.

    Code in the sandbox may have put a FIFO, device node, directory or
    symlink where we expect a file: opening a FIFO for reading would block
    forever. So: refuse anything but a regular file (ValueError), open with
    O_NONBLOCK and O_NOFOLLOW, and check the opened file again.
    """
    try:
      mode = os.lstat(full).st_mode
    except FileNotFoundError:
      if not flags & os.O_CREAT:
        raise
    else:
      if not stat.S_ISREG(mode):
        raise ValueError(f"{full.name!r} in the sandbox is not a regular file")
    fd = os.open(
      full, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
    )
    try:
      if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise ValueError(f"{full.name!r} in the sandbox is not a regular file")
    except BaseException:
      os.close(fd)
      raise
    return fd

  def write_file(self, relative: str, text: str) -> Path:
    """Writes a regular file in the sandbox (ValueError: escapes, or a
    non-regular file is in the way; OSError: cannot write)."""
    full = self.path(relative)
    full.parent.mkdir(parents=True, exist_ok=True)
    fd = self._open_regular(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with open(fd, "w", encoding="utf-8") as f:
      f.write(text)
    self._give_to_child(full)
    return full

  def read_file(self, relative: str, max_chars: int | None = None) -> str:
    """Reads a regular file in the sandbox, or its first `max_chars`
    characters (ValueError: escapes or is not a regular file; OSError:
    cannot read)."""
    fd = self._open_regular(self.path(relative), os.O_RDONLY)
    with open(fd, encoding="utf-8") as f:
      return f.read(-1 if max_chars is None else max_chars)

  def _give_to_child(self, start: Path) -> None:
    """Makes host-written files owned (so writable) by the sandbox uid."""
    if self.uid is None:
      return
    for path in [start, *start.parents]:
      if path == self.root or self.root not in path.parents:
        break
      os.lchown(path, self.uid, self.uid)

  def _chown_all(self) -> None:
    if self.uid is None:
      return
    for dirpath, dirnames, filenames in os.walk(self.root):
      for name in dirnames + filenames:
        os.lchown(os.path.join(dirpath, name), self.uid, self.uid)

  # -- running ----------------------------------------------------------------

  def _limits(
    self, cpu_s: float, memory_mb: int, nproc: int, fsize_mb: int, nofile: int
  ) -> dict[str, tuple[int, int]]:
    cpu = max(1, int(round(cpu_s)))
    if self.uid is None:
      # Without a private uid the cap counts all our own processes.
      nproc = _own_task_count() + nproc
    mem = memory_mb * 1024 * 1024
    fsize = fsize_mb * 1024 * 1024
    return {
      # Hard CPU limit one second later: SIGKILL if SIGXCPU is ignored.
      "RLIMIT_CPU": (cpu, cpu + 1),
      "RLIMIT_AS": (mem, mem),
      "RLIMIT_NPROC": (nproc, nproc),
      "RLIMIT_FSIZE": (fsize, fsize),
      "RLIMIT_NOFILE": (nofile, nofile),
      "RLIMIT_CORE": (0, 0),
    }

  def run(
    self,
    code: str | None = None,
    argv: Sequence[str] | None = None,
    timeout_s: float = 10.0,
    cpu_s: float | None = None,
    memory_mb: int = 512,
    max_output_bytes: int = 16384,
    nproc: int = 32,
    fsize_mb: int = 16,
    nofile: int = 64,
  ) -> SandboxResult:
    """Runs Python `code` or an `argv` command in the sandbox; never raises.

    `cpu_s` defaults to `timeout_s`. See the module docstring for the
    failure codes.
    """
    start = time.monotonic()
    if (code is None) == (argv is None):
      return SandboxResult(
        None, "", "", FailureCode.TOOL_ERROR, "give exactly one of code, argv"
      )
    if self._closed:
      return SandboxResult(
        None, "", "", FailureCode.TOOL_ERROR, "sandbox is closed"
      )
    if argv is not None and (
      not argv or not all(isinstance(a, str) and "\0" not in a for a in argv)
    ):
      return SandboxResult(
        None, "", "", FailureCode.TOOL_ERROR, f"bad argv {argv!r}"
      )
    token = f"AGENTIC_RL_SANDBOX={uuid.uuid4().hex}"
    try:
      self._chown_all()
      status_r, status_w = os.pipe()
    except OSError as e:
      return SandboxResult(
        None, "", "", FailureCode.TOOL_ERROR, f"sandbox setup failed: {e}"
      )
    config = {
      "status_fd": status_w,
      "limits": self._limits(
        timeout_s if cpu_s is None else cpu_s,
        memory_mb,
        nproc,
        fsize_mb,
        nofile,
      ),
      "uid": self.uid,
      "gid": self.uid,
      "root": str(self.root),
      "argv": None if argv is None else list(argv),
      "code": code,
      "allow_subprocess": self.allow_subprocess,
      "private_dirs": list(self.private_dirs),
      "private_dir_mb": _PRIVATE_DIR_MB,
      "host_namespace": _mount_namespace(),
    }
    command = [self.python, "-I", "-S", "-c", _LAUNCHER]
    namespaces = ["--net"] if self.network_namespace else []
    namespaces += ["--mount"] if self.private_dirs else []
    if namespaces:
      command = ["unshare", *namespaces, "--", *command]
    name, value = token.split("=")
    env = {
      "PATH": _SAFE_PATH,
      "HOME": str(self.root),
      "TMPDIR": str(self.root),
      "LANG": "C.UTF-8",
      name: value,
    }
    try:
      proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=self.root,
        env=env,
        start_new_session=True,
        pass_fds=(status_w,),
        close_fds=True,
      )
    except OSError as e:
      os.close(status_r)
      os.close(status_w)
      return SandboxResult(
        None, "", "", FailureCode.TOOL_ERROR, f"cannot start sandbox: {e}"
      )
    os.close(status_w)
    try:
      return self._supervise(
        proc,
        config,
        status_r,
        token.encode(),
        timeout_s,
        max_output_bytes,
        memory_mb,
        start,
      )
    finally:
      _kill_tree(proc.pid, self.uid, token.encode())
      if proc.poll() is None:
        proc.kill()
      proc.wait()
      for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
          pipe.close()
      os.close(status_r)

  def _supervise(
    self,
    proc: subprocess.Popen,
    config: dict[str, Any],
    status_r: int,
    token: bytes,
    timeout_s: float,
    max_output_bytes: int,
    memory_mb: int,
    start: float,
  ) -> SandboxResult:
    deadline = start + timeout_s
    try:
      proc.stdin.write(json.dumps(config).encode())
      proc.stdin.close()
    except OSError:
      pass  # the child died early; its status says why
    out, err = _Stream(max_output_bytes), _Stream(max_output_bytes)
    status = _Stream(4096)
    sel = selectors.DefaultSelector()
    for f, stream in ((proc.stdout, out), (proc.stderr, err)):
      os.set_blocking(f.fileno(), False)
      sel.register(f.fileno(), selectors.EVENT_READ, stream)
    os.set_blocking(status_r, False)
    sel.register(status_r, selectors.EVENT_READ, status)
    timed_out = False
    with sel:
      while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
          timed_out = True
          break
        for key, _ in sel.select(timeout=min(left, 0.5)):
          try:
            chunk = os.read(key.fd, 65536)
          except BlockingIOError:
            continue
          except OSError:
            chunk = b""
          if chunk:
            key.data.feed(chunk)
          else:
            sel.unregister(key.fd)
    if timed_out:
      _kill_tree(proc.pid, self.uid, token)
    try:
      returncode = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      timed_out = True
      _kill_tree(proc.pid, self.uid, token)
      returncode = proc.wait()
    failure, error = _classify(
      returncode, timed_out, status.text(), err.kept, timeout_s, memory_mb
    )
    return SandboxResult(
      returncode=returncode,
      stdout=out.text(),
      stderr=err.text(),
      failure=failure,
      error=error,
      timed_out=timed_out,
      truncated=bool(out.dropped or err.dropped),
      seconds=time.monotonic() - start,
    )

  def close(self) -> None:
    """Removes the directory (idempotent)."""
    if not self._closed:
      self._closed = True
      shutil.rmtree(self.root, ignore_errors=True)

  def __enter__(self) -> Sandbox:
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()

  def __del__(self) -> None:
    # Safety net for sandboxes that were never closed.
    try:
      self.close()
    except Exception:  # noqa: BLE001 - interpreter may be shutting down
      pass


def _classify(
  returncode: int,
  timed_out: bool,
  status: str,
  stderr: bytes,
  timeout_s: float,
  memory_mb: int,
) -> tuple[FailureCode | None, str]:
  """Maps how the child ended to a failure code and a message."""
  if timed_out:
    return FailureCode.TIMEOUT, f"wall-clock timeout of {timeout_s:g} s"
  if returncode == _EXIT_FORBIDDEN and status:
    return FailureCode.FORBIDDEN, f"forbidden: {status}"
  if returncode == _EXIT_MEMORY or (
    returncode != 0 and b"MemoryError" in stderr[-2000:]
  ):
    return FailureCode.TOOL_ERROR, f"memory limit of {memory_mb} MB exceeded"
  if returncode == _EXIT_SETUP and status:
    return FailureCode.TOOL_ERROR, status
  if returncode < 0:
    sig = -returncode
    if sig == signal.SIGXCPU or sig == signal.SIGKILL:
      # SIGKILL without our wall-clock kill comes from the hard CPU limit.
      return FailureCode.TIMEOUT, "CPU time limit exceeded"
    if sig == signal.SIGXFSZ:
      return FailureCode.TOOL_ERROR, "file size limit exceeded"
    name = signal.Signals(sig).name if sig in signal.valid_signals() else sig
    return FailureCode.TOOL_ERROR, f"killed by signal {name}"
  return None, ""
