"""Trajectories on disk: one `Trajectory.to_json()` line each (JSON lines).

Files ending in `.gz` are gzip-compressed. Writes without `append` go to a
temporary file that replaces the target only when complete, so a crash never
leaves a half-written file under the final name. Reading reports the file
and line of any bad record.
"""

from __future__ import annotations

import gzip
import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO

from agentic_rl.types import Trajectory

PathLike = str | os.PathLike


class TrajectoryFileError(ValueError):
  """A line of a trajectory file is not a valid trajectory record."""


def _open(path: PathLike, mode: str, gz: bool | None = None) -> IO[str]:
  if gz is None:
    gz = os.fspath(path).endswith(".gz")
  if gz:
    return gzip.open(path, mode + "t", encoding="utf-8")
  return open(path, mode, encoding="utf-8")


def _write_lines(f: IO[str], trajectories: Iterable[Trajectory]) -> int:
  n = 0
  for t in trajectories:
    # to_json escapes non-ASCII, so no record can contain a raw line break.
    f.write(t.to_json())
    f.write("\n")
    n += 1
  return n


def write_jsonl(
  path: PathLike, trajectories: Iterable[Trajectory], append: bool = False
) -> int:
  """Writes trajectories, one per line; returns how many were written."""
  if append:
    with _open(path, "a") as f:
      return _write_lines(f, trajectories)
  directory = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
  os.close(fd)
  try:
    # Compression follows the final name, not the temporary one.
    with _open(tmp, "w", gz=os.fspath(path).endswith(".gz")) as f:
      n = _write_lines(f, trajectories)
    os.replace(tmp, path)
  except BaseException:
    os.unlink(tmp)
    raise
  return n


def iter_jsonl(path: PathLike) -> Iterator[Trajectory]:
  """Yields the trajectories of a file lazily; blank lines are skipped."""
  with _open(path, "r") as f:
    for lineno, line in enumerate(f, start=1):
      if not line.strip():
        continue
      try:
        yield Trajectory.from_json(line)
      except (ValueError, KeyError, TypeError, AttributeError) as e:
        # Bad JSON is a ValueError; missing or mistyped fields raise the rest.
        raise TrajectoryFileError(
          f"{os.fspath(path)}:{lineno}: not a trajectory record: "
          f"{type(e).__name__}: {e}"
        ) from e


def read_jsonl(path: PathLike) -> list[Trajectory]:
  return list(iter_jsonl(path))
