"""services/kit/filewatch.py: a configuration file's owner is woken by a change, not by a clock.

Each watch here looks on its own only every 10 minutes (`recheck_s`), so a wake within a test's
bound can only come from inotify telling of the change.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from services.kit.filewatch import FolderWatch

TOLD_S = 30.0  # generous: a busy machine delivers the event late, never not at all
NEVER = 600.0


async def woken(watch: FolderWatch, change: Callable[[], object]) -> None:
    """The watch's next wait returns, told of a change made after it began waiting."""
    if not watch.notified:
        await asyncio.wait_for(watch.wait(), TOLD_S)  # the first wait starts inotify and returns: look once
    assert watch.notified, watch.why_polling
    waiting = asyncio.ensure_future(watch.wait())
    await asyncio.sleep(0)
    assert not waiting.done(), "woken with nothing changed"
    change()
    await asyncio.wait_for(waiting, TOLD_S)


@pytest.fixture
async def watched(tmp_path: Path) -> AsyncIterator[tuple[Path, FolderWatch]]:
    """A catalogue file in a folder of its own, and a watch over it."""
    file = tmp_path / "models.yaml"
    file.write_text("a: 1\n")
    watch = FolderWatch.of_files([file], poll_s=NEVER, recheck_s=NEVER)
    try:
        yield file, watch
    finally:
        watch.close()


async def test_a_file_written_in_place_wakes_its_watch(watched: tuple[Path, FolderWatch]) -> None:
    file, watch = watched
    await woken(watch, lambda: file.write_text("a: 2\n"))


async def test_an_editors_write_and_rename_wakes_its_watch(watched: tuple[Path, FolderWatch]) -> None:
    file, watch = watched

    def save() -> None:
        (file.parent / ".models.yaml.swp").write_text("a: 2\n")
        os.replace(file.parent / ".models.yaml.swp", file)

    await woken(watch, save)


async def test_a_configmaps_symlink_swap_wakes_its_watch(tmp_path: Path) -> None:
    """Kubernetes mounts a ConfigMap as <dir>/<key> -> ..data/<key>, ..data -> ..<stamp>/, and updates it
    by writing a new ..<stamp>/ and renaming a new ..data symlink over the old one: the file is never written."""
    (tmp_path / "..v1").mkdir()
    (tmp_path / "..v1" / "models.yaml").write_text("a: 1\n")
    (tmp_path / "..data").symlink_to("..v1")
    file = tmp_path / "models.yaml"
    file.symlink_to("..data/models.yaml")
    watch = FolderWatch.of_files([file], poll_s=NEVER, recheck_s=NEVER)
    try:
        (tmp_path / "..v2").mkdir()
        (tmp_path / "..v2" / "models.yaml").write_text("a: 2\n")
        (tmp_path / "..data_tmp").symlink_to("..v2")
        await woken(watch, lambda: os.replace(tmp_path / "..data_tmp", tmp_path / "..data"))
        assert file.read_text() == "a: 2\n"
    finally:
        watch.close()


async def test_a_tree_is_watched_in_its_folders_made_later_too(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    watch = FolderWatch({}, trees=[agents], poll_s=NEVER, recheck_s=NEVER)
    try:
        await woken(watch, lambda: (agents / "support").mkdir())
        await woken(watch, lambda: (agents / "support" / "prompt.md").write_text("be brief\n"))
        await woken(watch, lambda: (agents / "support" / "prompt.md").write_text("be briefer\n"))
    finally:
        watch.close()


async def test_it_wakes_for_its_files_not_for_reads_or_other_files_beside_them(
    watched: tuple[Path, FolderWatch],
) -> None:
    """A catalogue in a busy folder (a home, /etc) is looked at for its own name, not for every write there."""
    file, watch = watched
    await watch.wait()  # starts inotify
    waiting = asyncio.ensure_future(watch.wait())
    for nothing_to_it in (
        lambda: None,
        file.read_text,
        lambda: (file.parent / "app.log").write_text("a line\n"),
        lambda: (file.parent / "notes").mkdir(),
    ):
        nothing_to_it()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiting), 0.3)
    assert watch.notified
    file.write_text("a: 2\n")
    await asyncio.wait_for(waiting, TOLD_S)


async def test_a_folder_it_cannot_watch_is_looked_at_on_the_clock_and_says_why(tmp_path: Path) -> None:
    missing = tmp_path / "not-yet"
    watch = FolderWatch({missing: None}, poll_s=0.01, recheck_s=NEVER)
    try:
        await asyncio.wait_for(watch.wait(), TOLD_S)  # the clock's look, not a change
        assert not watch.notified and str(missing) in watch.why_polling
        missing.mkdir()  # each wait tries again: watched once it exists
        await woken(watch, lambda: (missing / "policy.yaml").write_text("a: 1\n"))
    finally:
        watch.close()
