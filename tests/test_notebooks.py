"""Executes every notebook so they cannot rot."""

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path, tmp_path):
  nb = nbformat.read(path, as_version=4)
  client = NotebookClient(
    nb,
    timeout=300,
    kernel_name="python3",
    resources={"metadata": {"path": str(tmp_path)}},
  )
  client.execute()
  errors = [
    o
    for c in nb.cells
    if c.cell_type == "code"
    for o in c.get("outputs", [])
    if o.output_type == "error"
  ]
  assert not errors


def test_there_are_notebooks():
  assert NOTEBOOKS, "notebooks/ is empty"
