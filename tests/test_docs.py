"""The README's and the documentation's code blocks run, so neither can drift from the code.

Each page gets a fresh directory and its blocks run there in order, as a reader would:

- a ``python`` block runs as a script (the page's directory is the current one and on the
  path); marked ``<!-- docs: file PATH -->`` on the line before, it is written to PATH
  instead (``settings.py`` gets the rest of a settings module around it);
  ``<!-- docs: django shell -->`` runs it in the page's Django project;
  ``<!-- docs: fragment -->`` only compiles it (kept for the few blocks that need a server, a
  Django 6 interpreter or another test's fixture);
- a ``bash`` block: ``stator migrate|status|graph|run`` lines naming a module of the page run
  (``run`` until idle), and so do ``python manage.py`` lines; every other ``stator`` line must
  name only options its command's ``--help`` lists; ``pip install`` lines name existing extras;
  ``python some/script.py`` names a file of the repository;
- ``<!-- docs: new directory -->`` starts a fresh directory for the rest of the page.

Besides: every repository path a page names in backquotes exists, and the Stator migration a
page names is the latest one.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
BIN = Path(sys.executable).parent
RUNNABLE = {"migrate", "status", "graph", "run"}
FENCE = re.compile(r"(?:<!-- docs: (?P<mark>[^>]*?) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)^```",
                   re.S | re.M)
DJANGO_SETTINGS_HEAD = """\
from pathlib import Path
BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "docs"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
"""
DJANGO_SETTINGS_TAIL = """
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth",
                  *(app for app in INSTALLED_APPS if app is not ...)]
"""


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    mark: str
    body: str

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> Iterator[Block]:
    text = page.read_text()
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start("lang")) + 1
        yield Block(page, line, m.group("lang"), m.group("mark") or "", m.group("body"))


def run(cmd: list[str], cwd: Path, where: str, env: dict[str, str] | None = None,
        stdin: str | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"{where}: {shlex.join(cmd)} exited {done.returncode}\n" \
        f"{done.stdout}\n{done.stderr}"
    return done.stdout


def environment(cwd: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(cwd), DJANGO_SETTINGS_MODULE="settings",
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("STATOR_DASHBOARD_TOKEN", None)
    return env


@cache
def options_of(command: tuple[str, ...], cwd: Path) -> frozenset[str]:
    """The options a command's --help lists."""
    done = subprocess.run([*command, "--help"], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env=dict(environment(cwd), COLUMNS="200"))
    assert done.returncode == 0, (command, done.stderr)
    return frozenset(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", done.stdout))


def shell_lines(body: str) -> Iterator[list[str]]:
    """Each command of a shell block as words: continuations joined, comments and the
    brackets of optional parts dropped, ``a && b`` split."""
    for line in body.replace("\\\n", " ").splitlines():
        line = re.sub(r"\s#\s.*$|^#.*$", "", line).replace("[", "").replace("]", "")
        for part in line.split("&&"):
            words = shlex.split(part)
            if words:
                yield words


def check_options(words: list[str], command: list[str], cwd: Path, where: str) -> None:
    known = options_of(tuple(command), cwd)
    for word in words:
        name = word.split("=", 1)[0]
        if re.fullmatch(r"--?[a-zA-Z][\w-]*", name):
            assert name in known, f"{where}: {shlex.join(words)}: {name} is not an option " \
                f"of {shlex.join(command)}"


def run_shell(block: Block, cwd: Path) -> None:
    where, env = block.where(), environment(cwd)
    for words in shell_lines(block.body):
        if words[:2] == ["pip", "install"]:
            for spec in words[2:]:
                for extras in re.findall(r"\[([\w,]+)\]", spec):
                    for extra in extras.split(","):
                        assert extra in EXTRAS, f"{where}: no extra {extra!r}"
        elif words[0] == "stator":
            sub = words[1]
            app = next((w for w in words[2:] if ":" in w and not w.startswith("-")), "")
            runnable = (sub in RUNNABLE and (cwd / f"{app.split(':')[0]}.py").exists()
                        and "--db" not in words)
            if runnable:
                extra = ["--until-idle"] if sub == "run" and "--run-for" not in words else []
                run([str(BIN / "stator"), *words[1:], *extra], cwd, where, env)
            else:
                check_options(words[2:], [str(BIN / "stator"), sub], cwd, where)
        elif words[:2] == ["python", "manage.py"]:
            django = [sys.executable, "-m", "django"]
            sub = words[2:4] if words[2] == "stator" else words[2:3]
            args = words[2 + len(sub):]
            if sub == ["stator", "dashboard"]:
                check_options(args, [*django, *sub], cwd, where)
                continue
            if sub == ["runstator"] and "--run-for" not in args and "--until-idle" not in args:
                args.append("--until-idle")
            if sub == ["shell"]:
                continue
            run([*django, *sub, *args], cwd, where, env)
        elif words[0] == "python" and len(words) > 1 and words[1].endswith(".py"):
            assert (ROOT / words[1]).exists(), f"{where}: no {words[1]}"


def run_python(block: Block, cwd: Path) -> None:
    compile(block.body, block.where(), "exec")
    mark = block.mark.split(" (")[0].strip()
    if mark.startswith("file "):
        path = cwd / mark.removeprefix("file ").strip()
        path.parent.mkdir(parents=True, exist_ok=True)
        for package in path.relative_to(cwd).parents:
            if package != Path("."):
                (cwd / package / "__init__.py").touch()
        body = block.body
        if path.name == "settings.py":
            body = DJANGO_SETTINGS_HEAD + body + DJANGO_SETTINGS_TAIL
        path.write_text(body)
    elif mark == "django shell":
        run([sys.executable, "-m", "django", "shell", "-c", block.body], cwd, block.where(),
            environment(cwd))
    elif mark != "fragment":
        assert not mark, f"{block.where()}: unknown marker {mark!r}"
        run([sys.executable, "-c", block.body], cwd, block.where(), environment(cwd))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_block_runs(page: Path, tmp_path: Path) -> None:
    cwd = tmp_path / "0"
    cwd.mkdir()
    for block in blocks(page):
        if block.mark == "new directory":
            cwd = tmp_path / str(block.line)
            cwd.mkdir()
            block.mark = ""
        if block.lang == "python":
            run_python(block, cwd)
        elif block.lang in ("bash", "sh", "console"):
            run_shell(block, cwd)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_paths_a_page_names_exist(page: Path) -> None:
    text = page.read_text()
    for path in re.findall(r"`((?:src|tests|benchmarks|examples|scripts|docs)/[\w./-]*\w)`",
                           text):
        assert (ROOT / path).exists(), f"{page.relative_to(ROOT)} names {path}, which is gone"


def test_the_migration_named_is_the_latest() -> None:
    migrations = ROOT / "src" / "stator" / "django" / "migrations"
    latest = max(int(p.name[:4]) for p in migrations.glob("[0-9][0-9][0-9][0-9]_*.py"))
    for page in PAGES:
        for number in re.findall(r"stator\.(\d{4})", page.read_text()):
            assert int(number) == latest, f"{page.relative_to(ROOT)} names stator.{number}; " \
                f"the latest migration is {latest:04d}"


def layout_entries() -> Iterator[tuple[Path, bool]]:
    """Each path the layout page's trees name, and whether its folder's modules are listed one
    by one (a folder given a line of its own, its contents summed up, is not)."""
    text = (ROOT / "docs" / "layout.md").read_text()
    for body in re.findall(r"```text\n(.*?)```", text, re.S):
        lines = body.splitlines()
        stack = [(-1, ROOT / lines[0].strip().rstrip("/"))]
        for line in lines[1:]:
            name = line.split()[0] if line.strip() else ""
            indent = len(line) - len(line.lstrip())
            if not re.fullmatch(r"[\w.]+/?", name) or indent > 12:
                continue  # a description's continuation line
            while stack[-1][0] >= indent:
                stack.pop()
            path = stack[-1][1] / name.rstrip("/")
            yield path, False
            yield stack[-1][1], True
            if name.endswith("/"):
                stack.append((indent, path))


def test_the_layout_names_every_module_and_only_modules_that_exist() -> None:
    named = {path for path, _ in layout_entries()}
    for path in named:
        assert path.exists(), f"docs/layout.md names {path.relative_to(ROOT)}, which is gone"
    listed = {folder for folder, detailed in layout_entries() if detailed}
    for folder in listed:
        for module in folder.glob("*.py"):
            if module.name != "__init__.py" or folder == ROOT / "src" / "stator":
                assert module in named, f"docs/layout.md does not name {module.relative_to(ROOT)}"
        for sub in folder.iterdir():
            if sub.is_dir() and (sub / "__init__.py").exists():
                assert sub in named, f"docs/layout.md does not name {sub.relative_to(ROOT)}/"
