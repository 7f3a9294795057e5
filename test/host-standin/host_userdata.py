"""Per-user storage routes of the stand-in: settings, users and userdata files.

Written from the host's observed HTTP behaviour (ComfyUI 0.3.64, with and without
`--multi-user`). What this module guarantees:

* Who a request belongs to: `default` unless `comfy.cli_args.args.multi_user` is on at
  request time; then the `comfy-user` header (or `default` without one), accepted only
  when it is a key of the in-memory user table (loaded once from `user/users.json`).
  An unknown user is a `KeyError`: 500 on `/userdata*`, 401 on `/settings`, 403 text
  on `/v2/userdata`.
* Every file operation stays inside `user/<id>/`; a path that leaves it gets the status
  the host gives (403 for files and listings, 400 for v2 listings, 500 for a move target).
* `ps.user_manager` is the user table (`users`, `get_users_file()`), the two names the
  authsvc plugin uses to add the ids it passes in `comfy-user`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from typing import Any

from aiohttp import web

import comfy.cli_args
import folder_paths

SETTINGS_FILE = "comfy.settings.json"
USERS_FILE = "users.json"
ONE_FILE = "/userdata/{file}"  # `file` is one path segment: sub-folders arrive as %2F

# the host's plain-text answers, word for word (clients and tests compare them)
NO_DIR, BAD_DIR, DIR_MISSING = "Directory not provided", "Invalid directory", "Directory not found"
BAD_USER, BAD_PATH = "Invalid user specified in request", "Invalid path requested"
PATH_MISSING, NOT_A_DIR = "Requested path not found", "Requested path is not a directory"
EXISTS, DUPLICATE = "File already exists", "Duplicate username."


def _multi_user() -> bool:
    # looked up on every request: the plugin switches it on while it is imported
    return bool(getattr(comfy.cli_args.args, "multi_user", False))


def _flag(request: web.Request, name: str) -> bool:
    # listing and full_info flags: "true" in any letter case, nothing else
    return request.rel_url.query.get(name, "").lower() == "true"


def _keeps_existing(request: web.Request) -> bool:
    # only the exact word "false" refuses to replace a file ("False", "0" still replace)
    return request.rel_url.query.get("overwrite") == "false"


def _plain(status: int, text: str | None = None) -> web.Response:
    # no text: an empty body (octet-stream on aiohttp 3.8), as the host answers
    return web.Response(status=status, text=text)


def _slashed(path: str) -> str:
    return path.replace(os.sep, "/")


def _stat_entry(path: str, shown_as: str) -> dict[str, Any]:
    st = os.stat(path)
    return {"path": shown_as, "size": st.st_size, "modified": st.st_mtime, "created": st.st_ctime}


class UserStore:
    """The host's user table plus the path rules of one user's folder."""

    def __init__(self) -> None:
        self.users: dict[str, str] = {}
        listed = self.get_users_file()
        if os.path.isfile(listed):
            with open(listed, encoding="utf-8") as f:
                self.users = json.load(f)
        elif not _multi_user():
            # a host started as single-user knows its one user from the start. Read while
            # the server is built, before custom nodes load and may switch the flag on.
            self.users = dict(default="default")

    def get_users_file(self) -> str:
        return os.path.join(folder_paths.get_user_directory(), USERS_FILE)

    def user_id(self, request: web.Request) -> str:
        if not _multi_user():
            return "default"
        wanted = request.headers.get("comfy-user", "default")
        if wanted not in self.users:
            raise KeyError("unknown user: " + wanted)
        return wanted

    def root(self, request: web.Request) -> str:
        base = os.path.abspath(folder_paths.get_user_directory())
        return os.path.abspath(os.path.join(base, self.user_id(request)))

    def file_in(self, request: web.Request, relative: str) -> tuple[str, str | None]:
        """(user folder, path of `relative` in it or None). The user folder is created
        only for a path that stays inside it, as the host does."""
        own = self.root(request)
        target = self.within(own, relative)
        if target is not None:
            os.makedirs(own, exist_ok=True)
        return own, target

    @staticmethod
    def within(root: str, relative: str) -> str | None:
        """The absolute path of `relative` under `root`, or None when it lands outside."""
        target = os.path.abspath(os.path.join(root, relative))
        return target if os.path.commonpath([root, target]) == root else None

    def add(self, raw_name: str) -> str:
        name = raw_name.strip()
        if not name:
            raise ValueError("empty username")
        key = re.sub(r"[^A-Za-z0-9_-]+", "-", name) + "_" + str(uuid.uuid4())
        self.users[key] = name
        with open(self.get_users_file(), "w", encoding="utf-8") as f:
            json.dump(self.users, f)
        return key


_store: UserStore | None = None


def request_user_id(request: web.Request) -> str:
    """The user id the host would use for `request`; KeyError for one it does not know."""
    if _store is None:
        raise RuntimeError("host_userdata.register() has not run")
    return _store.user_id(request)


def _list_files(folder: str, recurse: bool) -> list[str]:
    """Files under `folder`, relative with `/`: each folder's own files (by name) before
    those of its subfolders. Names starting with a dot are skipped, and so is everything
    below a folder whose name does."""
    found: list[str] = []
    for here, subdirs, files in os.walk(folder):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".")) if recurse else []
        rel = os.path.relpath(here, folder)
        found += [_slashed(n if rel == "." else os.path.join(rel, n)) for n in sorted(files) if not n.startswith(".")]
    return found


def _tree(root: str, start: str) -> list[dict[str, Any]]:
    """The v2 listing: every folder and file below `start`, folders first, each group
    ordered by name ignoring case (walk order breaks ties), paths relative to `root`."""
    entries: list[dict[str, Any]] = []
    for here, subdirs, files in os.walk(start):
        for n in subdirs:
            entries.append({"name": n, "path": _slashed(os.path.relpath(os.path.join(here, n), root)),
                            "type": "directory"})
        for n in files:
            full = os.path.join(here, n)
            st = os.stat(full)
            entries.append({"name": n, "path": _slashed(os.path.relpath(full, root)), "type": "file",
                            "size": st.st_size, "modified": st.st_mtime})
    entries.sort(key=lambda e: (e["type"] != "directory", e["name"].lower()))
    return entries


def register(ps: Any, routes: web.RouteTableDef) -> None:
    """Declares the routes on `routes` and sets `ps.user_manager`. Call it while the server
    is built, before custom nodes are imported (see UserStore)."""
    global _store
    store = UserStore()
    _store = store
    ps.user_manager = store

    # ---------------------------------------------------------------- settings
    def settings_path(request: web.Request) -> str:
        try:
            own, _ = store.file_in(request, SETTINGS_FILE)  # a plain name: always inside
            return os.path.join(own, SETTINGS_FILE)
        except KeyError:
            raise web.HTTPUnauthorized() from None  # the host answers 401 here, not 500

    def read_settings(path: str) -> dict[str, Any]:
        if not os.path.isfile(path):
            return {}
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def write_settings(path: str, values: dict[str, Any]) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(values, f, indent=4)

    @routes.get("/settings")
    async def all_settings(request: web.Request) -> web.Response:
        return web.json_response(read_settings(settings_path(request)))

    @routes.get("/settings/{id}")
    async def one_setting(request: web.Request) -> web.Response:
        return web.json_response(read_settings(settings_path(request)).get(request.match_info["id"]))

    @routes.post("/settings")
    async def merge_settings(request: web.Request) -> web.Response:
        path = settings_path(request)
        incoming = await request.json()
        write_settings(path, {**read_settings(path), **incoming})  # a non-object body: 500
        return web.Response()

    @routes.post("/settings/{id}")
    async def set_setting(request: web.Request) -> web.Response:
        path = settings_path(request)
        values = read_settings(path)
        values[request.match_info["id"]] = await request.json()
        write_settings(path, values)
        return web.Response()

    # ---------------------------------------------------------------- users
    @routes.get("/users")
    async def list_users(request: web.Request) -> web.Response:
        if _multi_user():
            return web.json_response({"storage": "server", "users": store.users})
        default_dir = os.path.join(folder_paths.get_user_directory(), "default")
        return web.json_response({"storage": "server", "migrated": os.path.exists(default_dir)})

    @routes.post("/users")
    async def create_user(request: web.Request) -> web.Response:
        name = (await request.json())["username"]  # missing or not text: 500, like the host
        if name in store.users.values():  # compared as sent; stored stripped
            return web.json_response({"error": DUPLICATE}, status=400)
        return web.json_response(store.add(name))

    # ---------------------------------------------------------------- listings
    @routes.get("/userdata")
    async def list_userdata(request: web.Request) -> web.Response:
        root = store.root(request)  # listings never create the user folder
        wanted = request.rel_url.query.get("dir", "")
        if not wanted:
            return _plain(400, NO_DIR)
        folder = store.within(root, wanted)
        if folder is None:
            return _plain(403, BAD_DIR)
        if not os.path.exists(folder):
            return _plain(404, DIR_MISSING)
        names = _list_files(folder, _flag(request, "recurse")) if os.path.isdir(folder) else []
        if _flag(request, "full_info"):
            return web.json_response([_stat_entry(os.path.join(folder, n), n) for n in names])
        if _flag(request, "split"):
            return web.json_response([[n, *n.split("/")] for n in names])
        return web.json_response(names)

    @routes.get("/v2/userdata")
    async def tree_userdata(request: web.Request) -> web.Response:
        try:
            root = store.root(request)
        except KeyError:
            return _plain(403, BAD_USER)
        start = store.within(root, request.rel_url.query.get("path", ""))
        if start is None:
            return _plain(400, BAD_PATH)
        if not os.path.exists(start):
            if start == root:  # a user who never saved anything has an empty tree
                return web.json_response([])
            return _plain(404, PATH_MISSING)
        if not os.path.isdir(start):
            return _plain(400, NOT_A_DIR)
        return web.json_response(_tree(root, start))

    # ---------------------------------------------------------------- single files
    def shown(root: str, path: str) -> str:
        return _slashed(os.path.relpath(path, root))

    def answer(request: web.Request, root: str, path: str) -> web.Response:
        if _flag(request, "full_info"):
            return web.json_response(_stat_entry(path, shown(root, path)))
        return web.json_response(shown(root, path))

    @routes.get(ONE_FILE)
    async def read_file(request: web.Request) -> web.StreamResponse:
        root, path = store.file_in(request, request.match_info["file"])
        if path is None:
            return _plain(403)
        if not os.path.exists(path):
            return _plain(404)
        return web.FileResponse(path)

    @routes.post(ONE_FILE)
    async def write_file(request: web.Request) -> web.Response:
        root, path = store.file_in(request, request.match_info["file"])
        if path is None:
            return _plain(403)
        if os.path.exists(path) and _keeps_existing(request):
            return _plain(409, EXISTS)
        body = await request.read()
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(body)
        except OSError:  # a folder where the file goes, or a file where a folder goes
            return _plain(400)
        return answer(request, root, path)

    @routes.delete(ONE_FILE)
    async def delete_file(request: web.Request) -> web.Response:
        root, path = store.file_in(request, request.match_info["file"])
        if path is None:
            return _plain(403)
        if not os.path.exists(path):
            return _plain(404)
        os.remove(path)  # a folder raises: 500, as on the host
        return _plain(204)

    @routes.post(ONE_FILE + "/move/{dest}")
    async def move_file(request: web.Request) -> web.Response:
        root, source = store.file_in(request, request.match_info["file"])
        if source is None:
            return _plain(403)
        if not os.path.exists(source):
            return _plain(404)
        target = store.within(root, request.match_info["dest"])
        if target is None:
            # the host fails here with a 500 and moves nothing; so do we
            raise PermissionError("move target leaves the user folder")
        if os.path.exists(target) and _keeps_existing(request):
            return _plain(409, EXISTS)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.move(source, target)
        return answer(request, root, target)
