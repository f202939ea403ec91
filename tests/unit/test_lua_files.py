"""The Redis stores' Lua scripts, read from .lua files by services/kit/lua.py.

Every lua/ directory under services/ and gateway/ is loaded by a module (found by its `lua.load("<package>"`),
every script in it loads with no placeholder left, and every file is one its store runs. The loader itself is
tried on packages made here: what it sends, and the import errors that name the file.
"""

from __future__ import annotations

import ast
import glob
import importlib
import re
import sys
import tomllib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.kit import lua
from services.sessions import redis_lua

ROOT = Path(__file__).resolve().parents[2]
_LOAD = re.compile(r"""\blua\.load\(\s*["']([\w.]+)["']""")


def _loaders() -> dict[str, str]:
    """package whose lua/ a module loads -> that module."""
    found: dict[str, str] = {}
    for top in ("services", "gateway"):
        for path in (ROOT / top).rglob("*.py"):
            for package in _LOAD.findall(path.read_text(encoding="utf-8")):
                assert package not in found, f"{package}'s scripts are loaded twice: {found[package]}, {path}"
                found[package] = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return found


LOADERS = _loaders()


def _lua_directories() -> set[str]:
    """The packages with a lua/ directory of .lua files."""
    return {
        ".".join(path.parent.parent.relative_to(ROOT).parts)
        for top in ("services", "gateway")
        for path in (ROOT / top).rglob(f"{lua.DIRECTORY}/*.lua")
    }


def _session_scripts_run() -> set[str]:
    """The script names services/sessions/redis_store.py hands to `_run`/`_eval` or reads as `lua.<NAME>`."""
    tree = ast.parse((ROOT / "services/sessions/redis_store.py").read_text(encoding="utf-8"))
    names = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in redis_lua.SCRIPTS
    }
    names |= {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "lua"
    } & set(redis_lua.SCRIPTS)
    return names


def test_every_lua_directory_is_loaded_by_a_module() -> None:
    assert _lua_directories() == set(LOADERS)
    assert {"services.sessions", "services.memory", "services.lib.policy"} <= set(LOADERS)


@pytest.mark.parametrize("package", sorted(LOADERS))
def test_every_script_loads_filled_and_documented(package: str) -> None:
    module = importlib.import_module(LOADERS[package])
    scripts = module._LUA
    files = sorted((ROOT / package.replace(".", "/") / lua.DIRECTORY).glob("*.lua"))
    assert sorted(scripts) == [f.stem for f in files]
    for f in files:
        assert f.read_text(encoding="utf-8").startswith("--"), f"{f}: opens with no comment saying what it does"
        text = scripts[f.stem]
        assert "redis.call" in text or "return" in text, f"{f}: {text!r}"
        assert "${" not in text, f"{f}: a placeholder is left"


@pytest.mark.parametrize("package", sorted(LOADERS))
def test_every_lua_file_is_run(package: str) -> None:
    """Each file's script is part of a source the store sends: a module constant holds it (alone or after a
    preamble), or, for the session scripts, `source(name)` of a name the session store runs."""
    module = importlib.import_module(LOADERS[package])
    sent = [value for value in vars(module).values() if isinstance(value, str)]
    if module is redis_lua:
        run = _session_scripts_run()
        assert run, "found no script names in services/sessions/redis_store.py"
        sent += [redis_lua.source(name) for name in run]
    unused = [name for name, text in module._LUA.items() if not any(text in source for source in sent)]
    assert unused == [], f"{package}/lua: scripts no store runs"


def test_every_lua_file_is_package_data() -> None:
    """A non-editable install (the image's `pip install .`) carries the scripts: pyproject.toml's package-data
    of services/gateway covers each file."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    files = [path.relative_to(ROOT) for top in ("services", "gateway") for path in (ROOT / top).rglob("*.lua")]
    assert files
    for path in files:
        top = path.parts[0]
        shipped = {
            Path(top, m)
            for pattern in data.get(top, [])
            for m in glob.glob(pattern, root_dir=ROOT / top, recursive=True)
        }
        assert path in shipped, f"{path}: no package-data pattern for {top} in pyproject.toml covers it"


def test_session_sources_have_their_preamble_and_clock() -> None:
    for name, body in redis_lua.SCRIPTS.items():
        full = redis_lua.source(name)
        assert full.endswith(body)
        if name in redis_lua.BARE:
            assert full == body
        else:
            assert full.startswith(redis_lua.PREAMBLE)
            clock = full[len(redis_lua.PREAMBLE) :].startswith("local now = clock()\n")
            assert clock == (name not in redis_lua.CLOCK_ON_DEMAND)
    assert f"local KEYS_PER_SESSION = {len(redis_lua.SESSION_KEYS) + 1}\n" in redis_lua.PREAMBLE
    assert f"math.min({redis_lua.ENTRY_EVENTS}, " in redis_lua.PREAMBLE


# ------------------------------------------------------------------ the loader, on packages made here


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[dict[str, str]], str]]:
    """Make a package whose lua/ holds the given files (name -> text); returns its name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[str] = []

    def make(files: dict[str, str]) -> str:
        name = f"lua_files_{uuid.uuid4().hex}"
        (tmp_path / name / lua.DIRECTORY).mkdir(parents=True)
        (tmp_path / name / "__init__.py").write_text("")
        for file, text in files.items():
            (tmp_path / name / lua.DIRECTORY / file).write_text(text, encoding="utf-8")
        importlib.invalidate_caches()
        made.append(name)
        return name

    yield make
    for name in made:
        sys.modules.pop(name, None)


def test_sends_what_follows_the_opening_comments_with_constants_filled(package: Callable[..., str]) -> None:
    name = package(
        {
            "put.lua": "-- PUT (ARGV: value): ${NOT_A_PLACEHOLDER} in a comment is not sent.\n--\n\n"
            "-- sent\nreturn {${MAX}, '${WHERE}'}\n",
            "get.lua": "-- GET\nreturn ${MAX}\n",
            "notes.txt": "not a script",
        }
    )
    scripts = lua.load(name, MAX=7, WHERE="here")
    assert dict(scripts) == {"get": "return 7\n", "put": "\n-- sent\nreturn {7, 'here'}\n"}


def test_an_unknown_placeholder_fails_naming_the_file_and_line(package: Callable[..., str]) -> None:
    name = package({"put.lua": "-- PUT\n\nlocal n = ${MAX}\nreturn ${MIN}\n"})
    with pytest.raises(lua.LuaFileError, match=rf"{name}/lua/put\.lua:4: no value for placeholder \$\{{MIN\}} "):
        lua.load(name, MAX=1)


def test_a_malformed_placeholder_fails(package: Callable[..., str]) -> None:
    name = package({"put.lua": "-- PUT\nreturn ${max}\n"})
    with pytest.raises(lua.LuaFileError, match=rf"{name}/lua/put\.lua:2: a placeholder not of the form"):
        lua.load(name, max=1)


def test_a_constant_no_script_uses_fails(package: Callable[..., str]) -> None:
    name = package({"put.lua": "-- PUT\nreturn ${MAX}\n"})
    with pytest.raises(lua.LuaFileError, match=rf"{name}/lua: no script uses MIN"):
        lua.load(name, MAX=1, MIN=0)


def test_a_file_of_comments_only_fails(package: Callable[..., str]) -> None:
    name = package({"put.lua": "-- PUT\n-- nothing else\n"})
    with pytest.raises(lua.LuaFileError, match=rf"{name}/lua/put\.lua: no script after its opening comments"):
        lua.load(name)


def test_a_package_without_scripts_fails(package: Callable[..., str], tmp_path: Path) -> None:
    name = package({})
    with pytest.raises(lua.LuaFileError, match=rf"{name}/lua: no \.lua files"):
        lua.load(name)
    (tmp_path / name / lua.DIRECTORY).rmdir()
    with pytest.raises(lua.LuaFileError, match=rf"{name}/lua: no such directory"):
        lua.load(name)
