"""What a new user reads before installing: the README's install lines name extras that
exist, and the package carries its licence and the metadata an index shows."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
README = (ROOT / "README.md").read_text()


def test_the_readme_says_how_to_install_the_postgresql_driver() -> None:
    assert "postgresql" in PROJECT["optional-dependencies"]
    assert f"pip install '{PROJECT['name']}[postgresql]'" in README
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "[postgresql]" in quick_start


def test_every_extra_the_readme_installs_exists() -> None:
    for name, extra in re.findall(r"pip install '([\w.-]+)\[(\w+)\]'", README):
        assert name in (PROJECT["name"], "."), name
        assert extra in PROJECT["optional-dependencies"], extra


def test_the_licence_ships_with_the_package() -> None:
    assert PROJECT["license"] == "BSD-3-Clause"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "BSD 3-Clause License" in text and "The Stator authors" in text


def test_the_index_gets_classifiers_keywords_urls_and_a_markdown_readme() -> None:
    assert PROJECT["readme"] == {"file": "README.md", "content-type": "text/markdown"}
    assert "Programming Language :: Python :: 3.11" in PROJECT["classifiers"]
    assert "Typing :: Typed" in PROJECT["classifiers"]
    assert PROJECT["keywords"]
    assert PROJECT["urls"]
