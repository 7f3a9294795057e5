"""data_dir.py (issue 28, item 9): where the data dir is, and the one-time move of the old
``<package>/users`` into ComfyUI's user directory, on real folders: a rename on one filesystem,
a copy across two (/dev/shm is a tmpfs, the temp dir is not), and what is never done (merging
into a data dir that holds data, leaving a half-copied folder behind)."""
from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import sys
import tempfile
import types
import unittest
from unittest import mock

from .support import LOGS, plugin_module

data_dir = plugin_module("data_dir")

SHM = "/dev/shm"


def mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def make_legacy(root: str) -> str:
    """A data dir as an older authsvc left it: the store, its WAL, the secret, a config, a
    nested folder, a socket (a live process's, never data) and the pid file."""
    legacy = os.path.join(root, "package", "users")
    os.makedirs(os.path.join(legacy, "nested"), mode=0o700)
    os.chmod(legacy, 0o700)
    files = {
        "authsvc.sqlite": b"SQLite format 3\x00" + os.urandom(4096),
        "authsvc.sqlite-wal": os.urandom(1024),
        "authsvc_secret.key": os.urandom(32),
        "config.json": b'{"store": {"backend": "sqlite"}}',
        "nested/authsvc_groups.json": b"{}",
        "sidecar.pid": b"12345\n",
    }
    for name, data in files.items():
        path = os.path.join(legacy, name)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o600)
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.join(legacy, "authsvc.sock"))
    s.close()
    return legacy


def snapshot(root: str) -> dict[str, tuple[bytes, int]]:
    out: dict[str, tuple[bytes, int]] = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                with open(path, "rb") as f:
                    out[os.path.relpath(path, root)] = (f.read(), mode(path))
    return out


class DataDirCase(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="authsvc-datadir-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        LOGS.records.clear()

    def moved_lines(self) -> list[str]:
        return LOGS.lines(logging.INFO, "data dir")


class WhereItIs(DataDirCase):
    def test_inside_comfyui_the_data_dir_is_authsvc_in_the_user_directory(self) -> None:
        user = os.path.join(self.tmp, "elsewhere", "my-user-dir")
        self.assertEqual(data_dir.choose({}, "/pkg", user), (os.path.join(user, "authsvc"), "/pkg/users"))

    def test_AUTHSVC_DATA_DIR_wins_and_nothing_is_moved(self) -> None:
        self.assertEqual(data_dir.choose({"AUTHSVC_DATA_DIR": "/d/x"}, "/pkg", "/u"), ("/d/x", None))

    def test_an_empty_AUTHSVC_DATA_DIR_is_unset(self) -> None:
        self.assertEqual(data_dir.choose({"AUTHSVC_DATA_DIR": ""}, "/pkg", "/u"), ("/u/authsvc", "/pkg/users"))

    def test_without_a_host_the_package_users_folder_as_before(self) -> None:
        self.assertEqual(data_dir.choose({}, "/pkg", None), ("/pkg/users", None))

    def test_the_user_directory_is_the_hosts_own_answer(self) -> None:
        """ComfyUI sets folder_paths' user directory from --user-directory before it imports custom nodes."""
        fake = types.ModuleType("folder_paths")
        chosen = os.path.join(self.tmp, "from-user-directory-flag")
        fake.get_user_directory = lambda: chosen  # type: ignore[attr-defined]
        with mock.patch.dict(sys.modules, {"folder_paths": fake}):
            self.assertEqual(data_dir.host_user_dir(), chosen)
            pkg = os.path.join(self.tmp, "pkg")
            with mock.patch.dict(os.environ, {"AUTHSVC_DATA_DIR": ""}):
                got = data_dir.prepare(os.environ, pkg)
        self.assertEqual(got, os.path.join(chosen, "authsvc"))
        self.assertEqual(mode(got), 0o700)
        self.assertFalse(os.path.exists(os.path.join(pkg, "users")))

    def test_no_folder_paths_module_means_no_user_directory(self) -> None:
        with mock.patch.dict(sys.modules, {"folder_paths": None}):
            self.assertIsNone(data_dir.host_user_dir())


class TheOneTimeMove(DataDirCase):
    def test_same_filesystem_one_rename_keeps_every_file_and_mode(self) -> None:
        legacy = make_legacy(self.tmp)
        before = snapshot(legacy)
        inode = os.stat(os.path.join(legacy, "authsvc.sqlite")).st_ino
        target = os.path.join(self.tmp, "comfy", "user", "authsvc")
        self.assertEqual(data_dir.move_legacy(legacy, target), "renamed")
        self.assertFalse(os.path.exists(legacy))
        self.assertEqual(snapshot(target), before)
        self.assertEqual(os.stat(os.path.join(target, "authsvc.sqlite")).st_ino, inode, "a rename, not a copy")
        self.assertEqual(mode(target), 0o700)
        lines = self.moved_lines()
        self.assertEqual(len(lines), 1, lines)
        self.assertIn(legacy, lines[0])
        self.assertIn(target, lines[0])

    @unittest.skipUnless(os.path.isdir(SHM) and os.access(SHM, os.W_OK), "/dev/shm (a second filesystem) is not writable here")
    def test_across_filesystems_copy_to_a_temp_sibling_then_rename_then_remove_the_old(self) -> None:
        shm = tempfile.mkdtemp(prefix="authsvc-datadir-", dir=SHM)
        self.addCleanup(shutil.rmtree, shm, True)
        legacy = make_legacy(shm)
        self.assertNotEqual(os.stat(shm).st_dev, os.stat(self.tmp).st_dev, "two filesystems")
        before = snapshot(legacy)
        parent = os.path.join(self.tmp, "user")
        target = os.path.join(parent, "authsvc")
        renames: list[tuple[str, str]] = []
        real_rename = os.rename

        def record(src: str, dst: str) -> None:
            renames.append((src, dst))
            real_rename(src, dst)

        with mock.patch.object(data_dir.os, "rename", side_effect=record):
            self.assertEqual(data_dir.move_legacy(legacy, target), "copied")
        # the first rename fails (EXDEV); the second publishes a complete sibling in one step
        self.assertEqual(renames[0], (legacy, target))
        self.assertEqual(os.path.dirname(renames[1][0]), parent)
        self.assertEqual(renames[1][1], target)
        self.assertEqual(snapshot(target), before, "every regular file, bytes and mode")
        self.assertFalse(os.path.exists(os.path.join(target, "authsvc.sock")), "a socket is a process's, not data")
        self.assertEqual(mode(target), 0o700)
        self.assertFalse(os.path.exists(legacy))
        self.assertEqual(os.listdir(parent), ["authsvc"], "no temp sibling left")
        lines = self.moved_lines()
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("across filesystems", lines[0])

    @unittest.skipUnless(os.path.isdir(SHM) and os.access(SHM, os.W_OK), "/dev/shm (a second filesystem) is not writable here")
    def test_a_copy_that_fails_half_way_leaves_the_old_folder_whole_and_no_new_one(self) -> None:
        shm = tempfile.mkdtemp(prefix="authsvc-datadir-", dir=SHM)
        self.addCleanup(shutil.rmtree, shm, True)
        legacy = make_legacy(shm)
        before = snapshot(legacy)
        parent = os.path.join(self.tmp, "user")
        target = os.path.join(parent, "authsvc")
        calls = {"n": 0}
        real = shutil.copyfileobj

        def fail_third(*args: object, **kwargs: object) -> None:
            calls["n"] += 1
            if calls["n"] == 3:
                raise OSError(28, "No space left on device")
            real(*args, **kwargs)  # type: ignore[arg-type]

        with mock.patch.object(data_dir.shutil, "copyfileobj", side_effect=fail_third):
            with self.assertRaises(OSError):
                data_dir.move_legacy(legacy, target)
        self.assertEqual(snapshot(legacy), before)
        self.assertEqual(os.listdir(parent), [], "neither the target nor a temp sibling")
        self.assertEqual(self.moved_lines(), [])

    def test_a_data_dir_that_holds_data_is_never_merged_into_or_overwritten(self) -> None:
        legacy = make_legacy(self.tmp)
        target = os.path.join(self.tmp, "user", "authsvc")
        os.makedirs(target)
        with open(os.path.join(target, "authsvc.sqlite"), "wb") as f:
            f.write(b"the newer store")
        before_old, before_new = snapshot(legacy), snapshot(target)
        self.assertEqual(data_dir.move_legacy(legacy, target), "kept")
        self.assertEqual((snapshot(legacy), snapshot(target)), (before_old, before_new))
        warnings = LOGS.lines(logging.WARNING, "was not moved")
        self.assertEqual(len(warnings), 1)
        self.assertIn(legacy, warnings[0])

    def test_an_empty_data_dir_is_replaced_by_the_old_one(self) -> None:
        legacy = make_legacy(self.tmp)
        before = snapshot(legacy)
        target = os.path.join(self.tmp, "user", "authsvc")
        os.makedirs(target)
        self.assertEqual(data_dir.move_legacy(legacy, target), "renamed")
        self.assertEqual(snapshot(target), before)

    def test_once_only_the_next_start_finds_nothing_to_move_and_says_nothing(self) -> None:
        pkg = os.path.join(self.tmp, "package")
        legacy = make_legacy(self.tmp)
        user = os.path.join(self.tmp, "user")
        fake = types.ModuleType("folder_paths")
        fake.get_user_directory = lambda: user  # type: ignore[attr-defined]
        with mock.patch.dict(sys.modules, {"folder_paths": fake}):
            first = data_dir.prepare({}, pkg)
            self.assertEqual(len(self.moved_lines()), 1)
            LOGS.records.clear()
            second = data_dir.prepare({}, pkg)
        self.assertEqual(first, second)
        self.assertFalse(os.path.exists(legacy))
        self.assertEqual(self.moved_lines(), [])
        self.assertEqual(LOGS.lines(logging.DEBUG), [])

    def test_an_empty_or_missing_old_folder_is_nothing_to_move(self) -> None:
        target = os.path.join(self.tmp, "user", "authsvc")
        self.assertEqual(data_dir.move_legacy(os.path.join(self.tmp, "missing"), target), "none")
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty)
        self.assertEqual(data_dir.move_legacy(empty, target), "none")
        self.assertTrue(os.path.isdir(empty))
        self.assertFalse(os.path.exists(target))
        self.assertEqual(self.moved_lines(), [])


class SocketPaths(DataDirCase):
    def test_a_short_data_dir_keeps_its_sockets(self) -> None:
        self.assertEqual(data_dir.socket_path("/home/a/ComfyUI/user/authsvc"), "/home/a/ComfyUI/user/authsvc/authsvc.sock")

    def test_a_deep_user_directory_puts_the_socket_in_a_short_folder_of_this_user(self) -> None:
        deep = os.path.join(self.tmp, *(["a-rather-long-folder-name"] * 6), "user", "authsvc")
        path = data_dir.socket_path(deep)
        self.addCleanup(shutil.rmtree, os.path.dirname(path), True)
        self.assertTrue(path.startswith(f"/tmp/authsvc-{os.getuid()}-"))
        http = path[: -len(".sock")] + "-http.sock"  # the sidecar's HTTP socket (sidecar/src/main.ts)
        for p in (path, http):
            self.assertLessEqual(len(p.encode()), 107, p)  # sun_path: 108 bytes with the NUL
        self.assertEqual(mode(os.path.dirname(path)), 0o700)
        self.assertEqual(data_dir.socket_path(deep), path, "the same data dir, the same folder")
        self.assertNotEqual(data_dir.socket_path(deep + "2"), path, "another data dir, another folder")
        shutil.rmtree(os.path.dirname(data_dir.socket_path(deep + "2")), True)
        # a real socket binds there
        s = socket.socket(socket.AF_UNIX)
        try:
            s.bind(http)
        finally:
            s.close()
            os.unlink(http)

    def test_a_short_folder_someone_else_planted_is_refused(self) -> None:
        deep = os.path.join(self.tmp, *(["b-rather-long-folder-name"] * 6), "authsvc")
        path = data_dir.socket_path(deep)
        folder = os.path.dirname(path)
        shutil.rmtree(folder)
        os.symlink(self.tmp, folder)  # a link planted in /tmp under the name we would use
        self.addCleanup(os.unlink, folder)
        with self.assertRaises(RuntimeError):
            data_dir.socket_path(deep)


if __name__ == "__main__":
    unittest.main()
