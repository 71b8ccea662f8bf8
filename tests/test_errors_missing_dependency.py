"""A dependency ggaudit declares that cannot be imported (issue 35, section 4: jinja2 was missing in one
environment) is the installation's to fix, not a bug: one line saying which module and how to install it,
exit 2. A module of ggaudit's own that cannot be imported is still an internal error (exit 3).

Each run is the command line in a subprocess from the checkout (ggaudit's ``__main__``, run as ``python -m ggaudit``
runs it), after a shim folder first on ``sys.path`` made the module unimportable: a finder raising
ModuleNotFoundError for it, or a module of that name that raises ImportError as it loads (a broken install). The
shim is put there by the command itself, not PYTHONPATH, which the Windows lane's embeddable Python ignores."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ggaudit.cli.dependencies import missing_dependency
from ggaudit.io.shell import shell_word

from support import REPO, write_small_model

#: A finder, first on sys.meta_path, that finds no module named {module} (nor any of its submodules).
_UNFINDABLE = """\
import sys

class _Unfindable:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r} or name.startswith({module!r} + "."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _Unfindable())
"""

#: The jinja2 this environment has (the version an import that fails says is installed).
JINJA2 = importlib.metadata.version("jinja2")
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


#: ``python -c`` this, then the command's words: the shim folder first on sys.path, its finder (if any) on
#: sys.meta_path, then ggaudit's ``__main__`` as ``python -m ggaudit`` runs it.
_SHIMMED = """\
import os, runpy, sys
shim = sys.argv.pop(1)
sys.path.insert(0, shim)
if os.path.exists(os.path.join(shim, "_unfindable.py")):
    import _unfindable
runpy.run_module("ggaudit", run_name="__main__", alter_sys=True)
"""


def _run(tmp_path: Path, *args: object) -> subprocess.CompletedProcess[str]:
    (tmp_path / "shim").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-c", _SHIMMED, os.fspath(tmp_path / "shim"), *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def _unfindable(tmp_path: Path, module: str) -> None:
    (tmp_path / "shim").mkdir()
    (tmp_path / "shim" / "_unfindable.py").write_text(_UNFINDABLE.format(module=module))


@pytest.fixture()
def templated(tmp_path: Path) -> Path:
    """A GGUF with a chat template: scanning it parses the template, with jinja2."""
    return write_small_model(tmp_path / "chat.gguf", metadata={"tokenizer.chat_template": TEMPLATE})


def test_a_missing_jinja2_says_so_and_how_to_install_it(tmp_path: Path, templated: Path) -> None:
    _unfindable(tmp_path, "jinja2")
    done = _run(tmp_path, "scan", templated)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("ggaudit: error: ggaudit needs the module jinja2 (jinja2>=3.0), which is not installed; "
                           f"install it: pip install {shell_word('jinja2>=3.0')}\n")


def test_a_model_without_a_template_needs_no_jinja2(tmp_path: Path) -> None:
    _unfindable(tmp_path, "jinja2")
    done = _run(tmp_path, "scan", write_small_model(tmp_path / "plain.gguf"))
    assert (done.returncode, done.stderr) == (0, "")


def test_a_jinja2_that_fails_to_import_says_what_it_raised(tmp_path: Path, templated: Path) -> None:
    (tmp_path / "shim").mkdir()
    (tmp_path / "shim" / "jinja2.py").write_text('raise ImportError("this jinja2 is broken")\n')
    done = _run(tmp_path, "check", templated)
    assert done.returncode == 2
    assert done.stderr == ("ggaudit: error: ggaudit needs the module jinja2 (jinja2>=3.0), which cannot be imported "
                           f"(this jinja2 is broken; installed: jinja2 {JINJA2}); install it: pip install "
                           f"{shell_word('jinja2>=3.0')}\n")


def test_a_module_of_ggaudit_that_cannot_be_imported_is_still_a_bug(tmp_path: Path, templated: Path) -> None:
    _unfindable(tmp_path, "ggaudit.format.templates")
    done = _run(tmp_path, "scan", templated)
    assert done.returncode == 3
    assert done.stderr.startswith("ggaudit: internal error: ModuleNotFoundError: No module named "
                                  "'ggaudit.format.templates' (a bug in ggaudit")


def test_only_modules_ggaudit_declares_are_named() -> None:
    assert missing_dependency(ModuleNotFoundError("No module named 'yaml'", name="yaml")) is None
    assert missing_dependency(ModuleNotFoundError("No module named 'ggaudit.x'", name="ggaudit.x")) is None
    assert missing_dependency(ModuleNotFoundError("No module named 'distributed'", name="distributed")) == (
        "ggaudit needs the module distributed (dask[distributed]>=2024.1), which is not installed; install it: "
        f"pip install {shell_word('ggaudit[dask]')}")
    assert missing_dependency(ImportError("cannot import name 'nodes' from 'jinja2'", name="jinja2")) == (
        "ggaudit needs the module jinja2 (jinja2>=3.0), which cannot be imported (cannot import name 'nodes' from "
        f"'jinja2'; installed: jinja2 {JINJA2}); install it: pip install {shell_word('jinja2>=3.0')}")
