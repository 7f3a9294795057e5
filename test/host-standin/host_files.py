"""The stand-in's file routes: model lists, uploads, /view, model metadata, /internal file lists.

Each `register_*` function decorates its handlers onto the `web.RouteTableDef` it is given
(server.py decides where they go in the route table). Status codes and bodies follow what the
real ComfyUI 0.3.64 answers (fixtures/ and black-box runs), with these deliberate differences:

* Uploads are streamed to `<base>/.standin-uploads/` in 64 KiB chunks and renamed into place,
  so memory stays flat; the size limit (`--max-upload-size`, 100 MiB) still gives aiohttp's 413.
* `/upload/mask` stores the mask as sent (no PIL compositing), and `/view?preview=&channel=`
  and model previews serve the file as it is.
"""
from __future__ import annotations

import hashlib
import json
import mimetypes
import os
import shutil
import struct
import uuid
from typing import Any, Awaitable, Callable

from aiohttp import web

import folder_paths

CHUNK = 64 * 1024
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_FILE_TYPES = ("output", "input", "temp")
_BAD_DIRECTORY_TYPE = {"error": "Invalid directory type"}
_ACTIVE_TYPES = {"text/html", "application/xhtml+xml", "text/javascript", "text/css"}


def _mount(routes: web.RouteTableDef, table: tuple[tuple[str, str, Handler], ...]) -> None:
    """Adds `(method, path, handler)` rows in order; a GET also answers HEAD, as `routes.get` does."""
    for method, path, handler in table:
        routes.route(method, path, **({"allow_head": True} if method == "GET" else {}))(handler)


def _bare(status: int) -> web.Response:
    """An empty answer: the real host's 400/403/404s carry no body (nor JSON)."""
    return web.Response(status=status)


def _inside(root: str, path: str) -> bool:
    root = os.path.abspath(root)
    return os.path.commonpath((root, os.path.abspath(path))) == root


def _upload_limit() -> int:
    import server  # the caller's module; imported late because server.py imports this one

    return round(float(getattr(server.args, "max_upload_size", 100)) * 1024 * 1024)


# --------------------------------------------------------------------------- model lists
def register_models(ps: Any, routes: web.RouteTableDef) -> None:
    async def embeddings(request: web.Request) -> web.Response:
        names = folder_paths.get_filename_list("embeddings")
        return web.json_response([os.path.splitext(n)[0] for n in names])

    async def model_folders(request: web.Request) -> web.Response:
        return web.json_response(list(folder_paths.folder_names_and_paths))

    async def model_files(request: web.Request) -> web.Response:
        folder = request.match_info.get("folder", "")
        if folder not in folder_paths.folder_names_and_paths:
            return _bare(404)
        return web.json_response(folder_paths.get_filename_list(folder))

    _mount(routes, (
        ("GET", "/embeddings", embeddings),
        ("GET", "/models", model_folders),
        ("GET", "/models/{folder}", model_files),
    ))


# --------------------------------------------------------------------------- uploads
class _Upload:
    """One upload form: its text fields, and the `image` file spooled to disk with its sha256."""

    def __init__(self, spool_dir: str) -> None:
        self.spool_dir = spool_dir
        self.fields: dict[str, str] = {}
        self.filename: str | None = None  # None: no `image` part; "": one without a file name
        self.spool: str | None = None
        self.digest: bytes = b""
        self._out: Any = None
        self._hash: Any = None

    def open_file(self, filename: str) -> None:
        self.filename = filename
        os.makedirs(self.spool_dir, exist_ok=True)
        self.spool = os.path.join(self.spool_dir, uuid.uuid4().hex)
        self._out, self._hash = open(self.spool, "wb"), hashlib.sha256()

    @property
    def writing(self) -> bool:
        return self._out is not None

    def write(self, chunk: bytes) -> None:
        self._hash.update(chunk)
        self._out.write(chunk)

    def close_file(self) -> None:
        self._out.close()
        self._out = None
        self.digest = self._hash.digest()

    def discard(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        if self.spool is not None and os.path.exists(self.spool):
            os.remove(self.spool)
        self.spool = None


async def _read_upload(request: web.Request) -> _Upload:
    """Reads the form part by part; the file goes to disk chunk by chunk, never into memory.

    Counts bytes like aiohttp's `request.post()` (64 KiB reads, every part's payload), so an
    oversized form fails with the same 413 the real host gives.
    """
    form = _Upload(os.path.join(folder_paths.base_path, ".standin-uploads"))
    if getattr(request, "_post", None) is not None or request.content_type != "multipart/form-data":
        # Either a middleware (the gate) already parsed the form with post(), which the handler
        # must reuse (aiohttp spooled its files), or a form without files came url-encoded.
        _from_parsed(await request.post(), form)
        return form
    limit = _upload_limit()
    total = 0
    reader = await request.multipart()
    try:
        while True:
            part = await reader.next()
            if part is None:
                break
            is_image = part.name == "image" and form.filename is None
            if is_image and part.filename:
                form.open_file(part.filename)
            text = bytearray()
            while True:
                chunk = await part.read_chunk(CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if 0 < limit < total:
                    raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=total)
                if form.writing:
                    form.write(chunk)
                elif part.filename is None and len(text) < CHUNK:
                    text += chunk  # a text field; other files' contents are never kept
            if form.writing:
                form.close_file()
            elif is_image:
                form.filename = ""  # `image` as a plain field, or a file part without a name
            elif part.name is not None and part.filename is None and part.name not in form.fields:
                form.fields[part.name] = text.decode(part.get_charset(default="utf-8"), "replace")
    except BaseException:
        form.discard()
        raise
    return form


def _from_parsed(post: Any, form: _Upload) -> None:
    for key, value in post.items():
        if isinstance(value, str):
            form.fields.setdefault(key, value)
        elif key == "image" and form.filename is None and getattr(value, "filename", ""):
            form.open_file(value.filename)
            value.file.seek(0)
            for chunk in iter(lambda: value.file.read(CHUNK), b""):
                form.write(chunk)
            form.close_file()
    if "image" in post and form.filename is None:
        form.filename = ""  # `image` as a plain field, or a file part without a name


def _same_content(path: str, digest: bytes) -> bool:
    if not os.path.isfile(path):
        return False
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.digest() == digest


def _store(form: _Upload, keep: Callable[[_Upload], bool] | None = None) -> web.Response:
    """Moves the spooled upload into its folder and answers `{name, subfolder, type}`.

    Order of checks as on the real host: an unknown `type` fails first (500), then a missing
    file (400), then a name or subfolder that leaves the folder (400). Same content as an
    existing file: that file's name, nothing written. Same name, other content: `name (n).ext`,
    unless `overwrite` is `true` or `1`. `keep` may veto the write (the answer stays the same).
    """
    kind = form.fields.get("type", "input")
    folder = folder_paths.get_directory_by_type(kind)
    if folder is None:
        # the real handler crashes on an unknown type, which aiohttp answers with its 500
        raise ValueError(f"unknown upload type {kind!r}")
    if form.filename is None:
        return _bare(400)
    if not form.filename:
        # a file part without a name (or `image` sent as a plain field) crashes the real one too
        raise ValueError("upload without a file name")
    subfolder = form.fields.get("subfolder", "")
    target_dir = os.path.join(folder, os.path.normpath(subfolder))
    name = form.filename
    if not _inside(folder, os.path.join(target_dir, name)):
        return _bare(400)
    os.makedirs(target_dir, exist_ok=True)
    if form.fields.get("overwrite") not in ("true", "1"):
        stem, ext = os.path.splitext(name)
        n = 0
        while os.path.exists(os.path.join(target_dir, name)):
            if _same_content(os.path.join(target_dir, name), form.digest):
                form.discard()  # an identical file is already there: answer its name
                break
            n += 1
            name = f"{stem} ({n}){ext}"
    answer = web.json_response({"name": name, "subfolder": subfolder, "type": kind})
    wanted = keep is None or keep(form)  # runs even for a duplicate, so its errors still show
    if form.spool is not None and wanted:
        shutil.move(form.spool, os.path.join(target_dir, name))
        form.spool = None
    return answer


def _original_exists(form: _Upload) -> bool:
    """/upload/mask writes only over an existing original named by `original_ref`."""
    ref = json.loads(form.fields.get("original_ref"))  # type: ignore[arg-type]  (missing or not JSON: 500 like ComfyUI)
    filename = ref["filename"]  # absent: KeyError, a 500 as on the real host
    folder = folder_paths.get_directory_by_type(ref.get("type"))
    if folder is None:
        return False
    here = os.path.join(folder, ref.get("subfolder", ""))
    original = os.path.join(here, filename)
    return _inside(here, original) and os.path.isfile(original)


def register_files(ps: Any, routes: web.RouteTableDef) -> None:
    async def upload_image(request: web.Request) -> web.Response:
        form = await _read_upload(request)
        try:
            return _store(form)
        finally:
            form.discard()

    async def upload_mask(request: web.Request) -> web.Response:
        form = await _read_upload(request)
        try:
            return _store(form, _original_exists)
        finally:
            form.discard()

    async def view(request: web.Request) -> web.StreamResponse:
        q = request.rel_url.query
        if "filename" not in q:
            return _bare(404)
        name, folder = folder_paths.annotated_filepath(q["filename"])
        if not name or name.startswith("/") or ".." in name:
            return _bare(400)
        if folder is None:
            folder = folder_paths.get_directory_by_type(q.get("type", "output"))
            if folder is None:
                return _bare(400)
        here = os.path.join(folder, q.get("subfolder", ""))
        if not _inside(folder, here):
            return _bare(403)
        name = os.path.basename(name)  # a name carrying a folder is looked up by its last part
        path = os.path.join(here, name)
        if not os.path.isfile(path):
            return _bare(404)
        # types a browser would run (HTML, script, CSS) are sent as opaque bytes, like the real host
        mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if mime in _ACTIVE_TYPES:
            mime = "application/octet-stream"
        return web.FileResponse(path, headers={"Content-Disposition": f'filename="{name}"', "Content-Type": mime})

    async def view_metadata(request: web.Request) -> web.Response:
        folder = request.match_info["folder_name"]
        filename = request.rel_url.query.get("filename")
        if folder not in folder_paths.folder_names_and_paths or not filename or not filename.endswith(".safetensors"):
            return _bare(404)
        path = folder_paths.get_full_path(folder, filename)
        if path is None:
            return _bare(404)
        with open(path, "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(size))
        meta = header.get("__metadata__")
        if meta is None:
            return _bare(404)
        return web.json_response(meta)

    _mount(routes, (
        ("POST", "/upload/image", upload_image),
        ("POST", "/upload/mask", upload_mask),
        ("GET", "/view", view),
        ("GET", "/view_metadata/{folder_name}", view_metadata),
    ))


# --------------------------------------------------------------------------- experiment
_NOT_MODEL_FOLDERS = ("configs", "custom_nodes")  # never listed by /experiment/models


def _model_entries(dirs: list[str]) -> list[dict[str, Any]]:
    """Model files of each directory (hidden ones skipped), with the index of that directory."""
    found = []
    for index, root in enumerate(dirs):
        for here, subdirs, names in os.walk(root, followlinks=True):
            subdirs[:] = sorted(d for d in subdirs if d[0] != ".")  # hidden folders are skipped
            for n in names:
                if n.startswith(".") or os.path.splitext(n)[1].lower() not in folder_paths.supported_pt_extensions:
                    continue
                path = os.path.join(here, n)
                st = os.stat(path)
                found.append({"name": os.path.relpath(path, root).replace(os.sep, "/"), "pathIndex": index,
                              "modified": st.st_mtime, "created": st.st_ctime, "size": st.st_size})
    return found


def _preview_of(model: str) -> str | None:
    """An image beside the model: `<stem>.<image ext>` or `<stem>.preview.<image ext>`."""
    folder, stem = os.path.split(os.path.splitext(model)[0])
    if not os.path.isdir(folder):
        return None
    for entry in sorted(os.listdir(folder)):
        if not entry.startswith(stem + "."):
            continue
        rest = entry[len(stem) + 1:]
        if rest.lower().startswith("preview."):
            rest = rest[len("preview."):]
        if "." not in rest and (mimetypes.guess_type("x." + rest)[0] or "").startswith("image/"):
            return os.path.join(folder, entry)
    return None


def register_experiment_models(ps: Any, routes: web.RouteTableDef) -> None:
    async def model_folders(request: web.Request) -> web.Response:
        return web.json_response([{"name": name, "folders": dirs}
                                  for name, (dirs, _exts) in folder_paths.folder_names_and_paths.items()
                                  if name not in _NOT_MODEL_FOLDERS])

    async def model_files(request: web.Request) -> web.Response:
        folder = request.match_info["folder"]
        if folder not in folder_paths.folder_names_and_paths:
            return _bare(404)
        return web.json_response(_model_entries(folder_paths.get_folder_paths(folder)))

    async def model_preview(request: web.Request) -> web.StreamResponse:
        folder = request.match_info["folder"]
        if folder not in folder_paths.folder_names_and_paths:
            return _bare(404)
        # a bad index is the real host's 500 too (int() / list index errors)
        root = folder_paths.get_folder_paths(folder)[int(request.match_info["path_index"])]
        # `..` in the name is followed, as on the real host (a gate has to stop it, not this route)
        image = _preview_of(os.path.join(root, request.match_info["filename"]))
        if image is None:
            return _bare(404)
        return web.FileResponse(image)

    _mount(routes, (
        ("GET", "/experiment/models", model_folders),
        ("GET", "/experiment/models/{folder}", model_files),
        ("GET", "/experiment/models/preview/{folder}/{path_index}/{filename:.*}", model_preview),
    ))


# --------------------------------------------------------------------------- internal
def register_internal(ps: Any, routes: web.RouteTableDef) -> None:
    async def folder_table(request: web.Request) -> web.Response:
        return web.json_response({name: dirs for name, (dirs, _exts) in folder_paths.folder_names_and_paths.items()})

    async def top_level_files(request: web.Request) -> web.Response:
        kind = request.match_info["directory_type"]
        if kind not in _FILE_TYPES:
            return web.json_response(_BAD_DIRECTORY_TYPE, status=400)
        folder = folder_paths.get_directory_by_type(kind) or ""
        with os.scandir(folder) as it:
            files = [(e.stat().st_mtime, e.name) for e in it if e.is_file()]
        files.sort(key=lambda f: f[0], reverse=True)  # newest first
        return web.json_response([name for _mtime, name in files])

    _mount(routes, (
        ("GET", "/folder_paths", folder_table),
        ("GET", "/files/{directory_type}", top_level_files),
    ))
