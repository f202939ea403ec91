"""Redis Lua scripts kept as .lua files next to their store, read once when the store's module is imported.

A store's scripts are the files of the `lua/` directory in its package, one script per file, named by the
file's stem. A file opens with `--` comment lines that say what the script does and what its KEYS and ARGV
hold; they are not sent to Redis (everything from the first other line on is, byte for byte). `${NAME}` in
a script is replaced by the constant NAME the store passes, so the Lua and the Python share one value. A
placeholder no constant fills, a constant no script uses, or a file without a script fails the import with
an error that names the file, rather than reaching Redis as a script that cannot run.
"""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import Mapping

DIRECTORY = "lua"
_PLACEHOLDER = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")


class LuaFileError(ValueError):
    """A store's .lua files do not make the scripts it expects."""


def load(package: str, **constants: object) -> Mapping[str, str]:
    """The scripts of `package`'s lua/ directory by file stem, their placeholders filled from `constants`."""
    where = f"{package.replace('.', '/')}/{DIRECTORY}"
    directory = importlib.resources.files(package) / DIRECTORY
    if not directory.is_dir():
        raise LuaFileError(f"{where}: no such directory (are the .lua files packaged?)")
    scripts: dict[str, str] = {}
    unused = set(constants)
    for entry in sorted(directory.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".lua"):
            continue
        path = f"{where}/{entry.name}"
        header, script = _split(entry.read_text(encoding="utf-8"))
        if not script.strip():
            raise LuaFileError(f"{path}: no script after its opening comments")
        for start in (m.start() for m in re.finditer(r"\$\{", script)):
            line = header + script.count("\n", 0, start) + 1
            found = _PLACEHOLDER.match(script, start)
            if found is None:
                raise LuaFileError(f"{path}:{line}: a placeholder not of the form ${{NAME}} is left unfilled")
            if found.group(1) not in constants:
                given = ", ".join(sorted(constants)) or "none"
                raise LuaFileError(f"{path}:{line}: no value for placeholder {found.group()} (given: {given})")
            unused.discard(found.group(1))
        script = _PLACEHOLDER.sub(lambda m: str(constants[m.group(1)]), script)
        scripts[entry.name.removesuffix(".lua")] = script
    if not scripts:
        raise LuaFileError(f"{where}: no .lua files")
    if unused:
        raise LuaFileError(f"{where}: no script uses {', '.join(sorted(unused))}")
    return scripts


def _split(text: str) -> tuple[int, str]:
    """How many opening comment lines `text` has, and the script after them."""
    lines = text.splitlines(keepends=True)
    header = 0
    while header < len(lines) and lines[header].startswith("--"):
        header += 1
    return header, "".join(lines[header:])
