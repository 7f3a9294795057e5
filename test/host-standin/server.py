"""Stand-in for ComfyUI's `server` module (PromptServer), modelled on ComfyUI 0.3.64.

Routes, middlewares, registration order (`add_routes`), status codes and JSON shapes
follow the real server and the captures in fixtures/. Differences are listed in README.md.
"""
from __future__ import annotations

import asyncio
import collections
import copy
import glob
import hashlib
import inspect
import ipaddress
import json
import logging
import mimetypes
import os
import re
import shutil
import socket
import struct
import sys
import time
import traceback
import urllib.parse
import uuid
from typing import Optional
from urllib import parse

import aiohttp
from aiohttp import web

import execution
import folder_paths
import nodes

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")

from comfy.cli_args import args  # noqa: E402  (one object, as in ComfyUI; main.py fills it)


class BinaryEventTypes:
    PREVIEW_IMAGE = 1
    UNENCODED_PREVIEW_IMAGE = 2
    TEXT = 3
    PREVIEW_IMAGE_WITH_METADATA = 4


def get_server_features() -> dict:
    return {"supports_preview_metadata": True, "max_upload_size": round(args.max_upload_size * 1024 * 1024)}


async def send_socket_catch_exception(function, message):
    try:
        await function(message)
    except (aiohttp.ClientError, aiohttp.ClientPayloadError, ConnectionResetError, BrokenPipeError, ConnectionError) as err:
        logging.warning("send error: {}".format(err))


def _load_fixture(name: str):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return json.load(f)


# ---------------------------------------------------------------------- log capture (/internal/logs)
_LOGS: collections.deque = collections.deque(maxlen=300)


class _LogCapture(logging.Handler):
    def emit(self, record):
        try:
            _LOGS.append({"t": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created)) +
                          ".%03d" % record.msecs, "m": self.format(record) + "\n"})
        except Exception:
            pass


# ---------------------------------------------------------------------- middlewares
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


@web.middleware
async def cache_control(request: web.Request, handler):
    """ComfyUI's middleware/cache_middleware.py."""
    response: web.Response = await handler(request)

    path_filename = request.path.rsplit("/", 1)[-1]
    is_entry_point = path_filename.startswith("index") and path_filename.endswith(".json")

    if request.path.endswith((".js", ".mjs", ".css")) or is_entry_point:
        response.headers.setdefault("Cache-Control", "no-cache")
        return response

    if not request.path.lower().endswith(IMG_EXTENSIONS):
        return response

    if response.status == 404:
        response.headers.setdefault("Cache-Control", "public, max-age=3600")
    elif response.status in (200, 201, 202, 203, 204, 205, 206, 301, 308):
        response.headers.setdefault("Cache-Control", "public, max-age=86400")
    elif response.status in (302, 303, 307):
        response.headers.setdefault("Cache-Control", "no-cache")
    return response


def is_loopback(host):
    if host is None:
        return False
    try:
        if ipaddress.ip_address(host).is_loopback:
            return True
        else:
            return False
    except Exception:
        pass

    loopback = False
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            r = socket.getaddrinfo(host, None, family, socket.SOCK_STREAM)
            for family, _, _, _, sockaddr in r:
                if not ipaddress.ip_address(sockaddr[0]).is_loopback:
                    return loopback
                else:
                    loopback = True
        except socket.gaierror:
            pass

    return loopback


def create_origin_only_middleware():
    """ComfyUI's default (no --enable-cors-header): 403 when a loopback Host and the Origin
    differ; OPTIONS answered here with a bare 200 (the handler never sees it)."""

    @web.middleware
    async def origin_only_middleware(request: web.Request, handler):
        if 'Host' in request.headers and 'Origin' in request.headers:
            host = request.headers['Host']
            origin = request.headers['Origin']
            host_domain = host.lower()
            parsed = urllib.parse.urlparse(origin)
            origin_domain = parsed.netloc.lower()
            host_domain_parsed = urllib.parse.urlsplit('//' + host_domain)

            loopback = is_loopback(host_domain_parsed.hostname)

            if parsed.port is None:
                host_domain = host_domain_parsed.hostname
            if host_domain_parsed.port is None:
                origin_domain = parsed.hostname

            if loopback and host_domain is not None and origin_domain is not None and len(host_domain) > 0 and len(origin_domain) > 0:
                if host_domain != origin_domain:
                    logging.warning("WARNING: request with non matching host and origin {} != {}, returning 403".format(host_domain, origin_domain))
                    return web.Response(status=403)

        if request.method == "OPTIONS":
            response = web.Response()
        else:
            response = await handler(request)

        return response

    return origin_only_middleware


class HandlerCounter:
    """Stand-in only: the innermost middleware. Counts and records every request that
    reaches the handlers (what a gate in front let through), read by the control server."""

    RECENT = 200

    def __init__(self, client_max_size: int):
        self.client_max_size = client_max_size
        self.total = 0
        self.by_route: collections.Counter = collections.Counter()
        self.last: Optional[dict] = None
        self.recent: collections.deque = collections.deque(maxlen=self.RECENT)

    def reset(self) -> None:
        self.total = 0
        self.by_route.clear()
        self.last = None
        self.recent.clear()

    @staticmethod
    def route_key(request: web.Request) -> str:
        route = getattr(request.match_info, "route", None)
        resource = getattr(route, "resource", None) if route is not None else None
        return f"{request.method} {resource.canonical if resource is not None else '<unmatched>'}"

    async def _record(self, request: web.Request, key: str) -> dict:
        headers: dict[str, str] = {}
        for k, v in request.headers.items():
            lk = k.lower()
            headers[lk] = headers[lk] + ", " + v if lk in headers else v
        rec = {
            "time": time.time(),
            "method": request.method,
            "route": key,
            "path": request.path,
            "raw_path": request.raw_path,
            "query_string": request.query_string,
            "match_info": {k: v for k, v in request.match_info.items()},
            "headers": headers,
        }
        ctype = request.headers.get("Content-Type", "").lower()
        if ctype.startswith("multipart/"):
            rec["body_streamed"] = True  # never read here: the handler streams it
        elif not request.body_exists:
            rec["body_sha256"] = hashlib.sha256(b"").hexdigest()
            rec["body_length"] = 0
        elif (request.content_length or 0) > self.client_max_size:
            rec["body_skipped"] = "larger than client_max_size"
        else:
            body = await request.read()  # cached: the handler reads the same bytes
            rec["body_sha256"] = hashlib.sha256(body).hexdigest()
            rec["body_length"] = len(body)
        return rec

    def middleware(self):
        counter = self

        @web.middleware
        async def standin_handler_counter(request: web.Request, handler):
            key = counter.route_key(request)
            counter.total += 1
            counter.by_route[key] += 1
            try:
                rec = await counter._record(request, key)
            except Exception as e:  # a broken body must still reach the handler as is
                rec = {"method": request.method, "route": key, "path": request.path, "record_error": repr(e)}
            counter.last = rec
            counter.recent.append(rec)
            return await handler(request)

        return standin_handler_counter


# ---------------------------------------------------------------------- user data (app/user_manager.py)
def get_file_info(path: str, relative_to: str) -> dict:
    return {
        "path": os.path.relpath(path, relative_to).replace(os.sep, '/'),
        "size": os.path.getsize(path),
        "modified": os.path.getmtime(path),
        "created": os.path.getctime(path),
    }


class AppSettings:
    def __init__(self, user_manager):
        self.user_manager = user_manager

    def get_settings(self, request):
        try:
            file = self.user_manager.get_request_user_filepath(request, "comfy.settings.json")
        except KeyError as e:
            logging.error("User settings not found.")
            raise web.HTTPUnauthorized() from e
        if os.path.isfile(file):
            try:
                with open(file) as f:
                    return json.load(f)
            except Exception:
                logging.error(f"The user settings file is corrupted: {file}")
                return {}
        else:
            return {}

    def save_settings(self, request, settings):
        file = self.user_manager.get_request_user_filepath(request, "comfy.settings.json")
        with open(file, "w") as f:
            f.write(json.dumps(settings, indent=4))

    def add_routes(self, routes):
        @routes.get("/settings")
        async def get_settings(request):
            return web.json_response(self.get_settings(request))

        @routes.get("/settings/{id}")
        async def get_setting(request):
            value = None
            settings = self.get_settings(request)
            setting_id = request.match_info.get("id", None)
            if setting_id and setting_id in settings:
                value = settings[setting_id]
            return web.json_response(value)

        @routes.post("/settings")
        async def post_settings(request):
            settings = self.get_settings(request)
            new_settings = await request.json()
            self.save_settings(request, {**settings, **new_settings})
            return web.Response(status=200)

        @routes.post("/settings/{id}")
        async def post_setting(request):
            setting_id = request.match_info.get("id", None)
            if not setting_id:
                return web.Response(status=400)
            settings = self.get_settings(request)
            settings[setting_id] = await request.json()
            self.save_settings(request, settings)
            return web.Response(status=200)


class UserManager:
    def __init__(self):
        user_directory = folder_paths.get_user_directory()
        self.settings = AppSettings(self)
        if not os.path.exists(user_directory):
            os.makedirs(user_directory, exist_ok=True)
        if args.multi_user:
            if os.path.isfile(self.get_users_file()):
                with open(self.get_users_file()) as f:
                    self.users = json.load(f)
            else:
                self.users = {}
        else:
            self.users = {"default": "default"}

    def get_users_file(self):
        return os.path.join(folder_paths.get_user_directory(), "users.json")

    def get_request_user_id(self, request):
        user = "default"
        if args.multi_user and "comfy-user" in request.headers:
            user = request.headers["comfy-user"]

        if user not in self.users:
            raise KeyError("Unknown user: " + user)

        return user

    def get_request_user_filepath(self, request, file, type="userdata", create_dir=True):
        user_directory = folder_paths.get_user_directory()

        if type == "userdata":
            root_dir = user_directory
        else:
            raise KeyError("Unknown filepath type:" + type)

        user = self.get_request_user_id(request)
        path = user_root = os.path.abspath(os.path.join(root_dir, user))

        # prevent leaving /{type}
        if os.path.commonpath((root_dir, user_root)) != root_dir:
            return None

        if file is not None:
            # Check if filename is url encoded
            if "%" in file:
                file = parse.unquote(file)

            # prevent leaving /{type}/{user}
            path = os.path.abspath(os.path.join(user_root, file))
            if os.path.commonpath((user_root, path)) != user_root:
                return None

        parent = os.path.split(path)[0]

        if create_dir and not os.path.exists(parent):
            os.makedirs(parent, exist_ok=True)

        return path

    def add_user(self, name):
        name = name.strip()
        if not name:
            raise ValueError("username not provided")
        user_id = re.sub("[^a-zA-Z0-9-_]+", '-', name)
        user_id = user_id + "_" + str(uuid.uuid4())

        self.users[user_id] = name

        with open(self.get_users_file(), "w") as f:
            json.dump(self.users, f)

        return user_id

    def add_routes(self, routes):
        self.settings.add_routes(routes)

        @routes.get("/users")
        async def get_users(request):
            if args.multi_user:
                return web.json_response({"storage": "server", "users": self.users})
            else:
                user_dir = self.get_request_user_filepath(request, None, create_dir=False)
                return web.json_response({
                    "storage": "server",
                    "migrated": os.path.exists(user_dir),
                })

        @routes.post("/users")
        async def post_users(request):
            body = await request.json()
            username = body["username"]
            if username in self.users.values():
                return web.json_response({"error": "Duplicate username."}, status=400)

            user_id = self.add_user(username)
            return web.json_response(user_id)

        @routes.get("/userdata")
        async def listuserdata(request):
            directory = request.rel_url.query.get('dir', '')
            if not directory:
                return web.Response(status=400, text="Directory not provided")

            path = self.get_request_user_filepath(request, directory)
            if not path:
                return web.Response(status=403, text="Invalid directory")

            if not os.path.exists(path):
                return web.Response(status=404, text="Directory not found")

            recurse = request.rel_url.query.get('recurse', '').lower() == "true"
            full_info = request.rel_url.query.get('full_info', '').lower() == "true"
            split_path = request.rel_url.query.get('split', '').lower() == "true"

            if recurse:
                pattern = os.path.join(glob.escape(path), '**', '*')
            else:
                pattern = os.path.join(glob.escape(path), '*')

            def process_full_path(full_path):
                if full_info:
                    return get_file_info(full_path, path)

                rel_path = os.path.relpath(full_path, path).replace(os.sep, '/')
                if split_path:
                    return [rel_path] + rel_path.split('/')

                return rel_path

            results = [
                process_full_path(full_path)
                for full_path in glob.glob(pattern, recursive=recurse)
                if os.path.isfile(full_path)
            ]

            return web.json_response(results)

        @routes.get("/v2/userdata")
        async def list_userdata_v2(request):
            requested_rel_path = request.rel_url.query.get('path', '')
            try:
                requested_rel_path = parse.unquote(requested_rel_path)
            except Exception as e:
                logging.warning(f"Failed to decode path parameter: {requested_rel_path}, Error: {e}")
                return web.Response(status=400, text="Invalid characters in path parameter")

            try:
                base_user_path = self.get_request_user_filepath(request, None, create_dir=False)
                if requested_rel_path:
                    target_abs_path = self.get_request_user_filepath(request, requested_rel_path, create_dir=False)
                else:
                    target_abs_path = base_user_path
            except KeyError as e:
                logging.warning(f"Access denied for user: {e}")
                return web.Response(status=403, text="Invalid user specified in request")

            if not target_abs_path:
                return web.Response(status=400, text="Invalid path requested")

            if not os.path.exists(target_abs_path):
                if target_abs_path == base_user_path:
                    return web.json_response([])
                else:
                    return web.Response(status=404, text="Requested path not found")

            if not os.path.isdir(target_abs_path):
                return web.Response(status=400, text="Requested path is not a directory")

            results = []
            try:
                for root, dirs, files in os.walk(target_abs_path, topdown=True):
                    for dir_name in dirs:
                        dir_path = os.path.join(root, dir_name)
                        rel_path = os.path.relpath(dir_path, base_user_path).replace(os.sep, '/')
                        results.append({"name": dir_name, "path": rel_path, "type": "directory"})
                    for file_name in files:
                        file_path = os.path.join(root, file_name)
                        rel_path = os.path.relpath(file_path, base_user_path).replace(os.sep, '/')
                        entry_info = {"name": file_name, "path": rel_path, "type": "file"}
                        try:
                            stats = os.stat(file_path)
                            entry_info["size"] = stats.st_size
                            entry_info["modified"] = stats.st_mtime
                        except OSError as stat_error:
                            logging.warning(f"Could not stat file {file_path}: {stat_error}")
                        results.append(entry_info)
            except OSError as e:
                logging.error(f"Error listing directory {target_abs_path}: {e}")
                return web.Response(status=500, text="Error reading directory contents")

            results.sort(key=lambda x: (x['type'] != 'directory', x['name'].lower()))
            return web.json_response(results)

        def get_user_data_path(request, check_exists=False, param="file"):
            file = request.match_info.get(param, None)
            if not file:
                return web.Response(status=400)

            path = self.get_request_user_filepath(request, file)
            if not path:
                return web.Response(status=403)

            if check_exists and not os.path.exists(path):
                return web.Response(status=404)

            return path

        @routes.get("/userdata/{file}")
        async def getuserdata(request):
            path = get_user_data_path(request, check_exists=True)
            if not isinstance(path, str):
                return path

            return web.FileResponse(path)

        @routes.post("/userdata/{file}")
        async def post_userdata(request):
            path = get_user_data_path(request)
            if not isinstance(path, str):
                return path

            overwrite = request.query.get("overwrite", 'true') != "false"
            full_info = request.query.get('full_info', 'false').lower() == "true"

            if not overwrite and os.path.exists(path):
                return web.Response(status=409, text="File already exists")

            try:
                body = await request.read()

                with open(path, "wb") as f:
                    f.write(body)
            except OSError as e:
                logging.warning(f"Error saving file '{path}': {e}")
                return web.Response(
                    status=400,
                    reason="Invalid filename. Please avoid special characters like :\\/*?\"<>|",
                )

            user_path = self.get_request_user_filepath(request, None)
            if full_info:
                resp = get_file_info(path, user_path)
            else:
                resp = os.path.relpath(path, user_path)

            return web.json_response(resp)

        @routes.delete("/userdata/{file}")
        async def delete_userdata(request):
            path = get_user_data_path(request, check_exists=True)
            if not isinstance(path, str):
                return path

            os.remove(path)

            return web.Response(status=204)

        @routes.post("/userdata/{file}/move/{dest}")
        async def move_userdata(request):
            source = get_user_data_path(request, check_exists=True)
            if not isinstance(source, str):
                return source

            dest = get_user_data_path(request, check_exists=False, param="dest")
            if not isinstance(source, str):
                return dest

            overwrite = request.query.get("overwrite", 'true') != "false"
            full_info = request.query.get('full_info', 'false').lower() == "true"

            if not overwrite and os.path.exists(dest):
                return web.Response(status=409, text="File already exists")

            logging.info(f"moving '{source}' -> '{dest}'")
            shutil.move(source, dest)

            user_path = self.get_request_user_filepath(request, None)
            if full_info:
                resp = get_file_info(dest, user_path)
            else:
                resp = os.path.relpath(dest, user_path)

            return web.json_response(resp)


# ---------------------------------------------------------------------- models (app/model_manager.py)
class ModelFileManager:
    def get_model_file_list(self, folder_name: str) -> list[dict]:
        folder_name = folder_paths.map_legacy(folder_name)
        folders = folder_paths.folder_names_and_paths[folder_name]
        output_list: list[dict] = []
        for index, folder in enumerate(folders[0]):
            if not os.path.isdir(folder):
                continue
            output_list.extend(self.recursive_search_models_(folder, index))
        return output_list

    def recursive_search_models_(self, directory: str, pathIndex: int) -> list[dict]:
        result = []
        for dirpath, subdirs, filenames in os.walk(directory, followlinks=True, topdown=True):
            subdirs[:] = [d for d in subdirs if d != ".git" and not d.startswith(".")]
            filenames = [f for f in filenames if not f.startswith(".")]
            filenames = folder_paths.filter_files_extensions(filenames, folder_paths.supported_pt_extensions)
            for file_name in filenames:
                try:
                    full_path = os.path.join(dirpath, file_name)
                    result.append({
                        "name": os.path.relpath(full_path, directory),
                        "pathIndex": pathIndex,
                        "modified": os.path.getmtime(full_path),
                        "created": os.path.getctime(full_path),
                        "size": os.path.getsize(full_path),
                    })
                except Exception as e:
                    logging.warning(f"Warning: Unable to access {file_name}. Error: {e}. Skipping this file.")
        return result

    def get_model_previews(self, filepath: str) -> list[str]:
        dirname = os.path.dirname(filepath)
        if not os.path.exists(dirname):
            return []
        basename = os.path.splitext(filepath)[0]
        match_files = glob.glob(f"{glob.escape(basename)}.*", recursive=False)
        image_files = folder_paths.filter_files_content_types(match_files, ["image"])
        result = []
        for filename in image_files:
            _basename = os.path.splitext(filename)[0]
            if _basename == basename or _basename == f"{basename}.preview":
                result.append(filename)
        return result

    def add_routes(self, routes):
        @routes.get("/experiment/models")
        async def get_model_folders(request):
            model_types = list(folder_paths.folder_names_and_paths.keys())
            folder_black_list = ["configs", "custom_nodes"]
            output_folders = []
            for folder in model_types:
                if folder in folder_black_list:
                    continue
                output_folders.append({"name": folder, "folders": folder_paths.get_folder_paths(folder)})
            return web.json_response(output_folders)

        @routes.get("/experiment/models/{folder}")
        async def get_all_models(request):
            folder = request.match_info.get("folder", None)
            if folder not in folder_paths.folder_names_and_paths:
                return web.Response(status=404)
            return web.json_response(self.get_model_file_list(folder))

        @routes.get("/experiment/models/preview/{folder}/{path_index}/{filename:.*}")
        async def get_model_preview(request):
            folder_name = request.match_info.get("folder", None)
            path_index = int(request.match_info.get("path_index", None))
            filename = request.match_info.get("filename", None)

            if folder_name not in folder_paths.folder_names_and_paths:
                return web.Response(status=404)

            folders = folder_paths.folder_names_and_paths[folder_name]
            folder = folders[0][path_index]
            full_filename = os.path.join(folder, filename)

            previews = self.get_model_previews(full_filename)
            default_preview = previews[0] if len(previews) > 0 else None
            if default_preview is None or not os.path.isfile(default_preview):
                return web.Response(status=404)
            # ComfyUI re-encodes the preview to WEBP with PIL; the stand-in serves the file as is
            with open(default_preview, "rb") as f:
                body = f.read()
            return web.Response(body=body, content_type=mimetypes.guess_type(default_preview)[0] or "application/octet-stream")


# ---------------------------------------------------------------------- custom node manager
class CustomNodeManager:
    EXAMPLE_FOLDERS = ["example_workflows", "example", "examples", "workflow", "workflows"]
    EXTRA_LOCALE_FILES = ["nodeDefs.json", "commands.json", "settings.json"]

    @staticmethod
    def _load_json(path):
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except Exception:
            return {}

    @classmethod
    def _merge(cls, a, b):
        out = dict(a)
        for k, v in b.items():
            if isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k] = cls._merge(out[k], v)
            else:
                out[k] = v
        return out

    def build_translations(self):
        translations: dict = {}
        for folder in folder_paths.get_folder_paths("custom_nodes"):
            for custom_node_dir in sorted(glob.glob(os.path.join(glob.escape(folder), "*/"))):
                locales_dir = os.path.join(custom_node_dir, "locales")
                if not os.path.exists(locales_dir):
                    continue
                for lang_dir in glob.glob(os.path.join(glob.escape(locales_dir), "*/")):
                    lang_code = os.path.basename(os.path.dirname(lang_dir))
                    translations.setdefault(lang_code, {})
                    node_translations = self._load_json(os.path.join(lang_dir, "main.json"))
                    for extra in self.EXTRA_LOCALE_FILES:
                        data = self._load_json(os.path.join(lang_dir, extra))
                        if data:
                            node_translations[extra.split(".")[0]] = data
                    if node_translations:
                        translations[lang_code] = self._merge(translations[lang_code], node_translations)
        return translations

    def add_routes(self, routes, webapp, loadedModules):
        @routes.get("/workflow_templates")
        async def get_workflow_templates(request):
            files = []
            for folder in folder_paths.get_folder_paths("custom_nodes"):
                for folder_name in self.EXAMPLE_FOLDERS:
                    pattern = os.path.join(glob.escape(folder), f"*/{folder_name}/*.json")
                    files.extend(glob.glob(pattern))
            workflow_templates_dict: dict = {}
            for file in files:
                custom_nodes_name = os.path.basename(os.path.dirname(os.path.dirname(file)))
                workflow_name = os.path.splitext(os.path.basename(file))[0]
                workflow_templates_dict.setdefault(custom_nodes_name, []).append(workflow_name)
            return web.json_response(workflow_templates_dict)

        for module_name, module_dir in loadedModules:
            for folder_name in self.EXAMPLE_FOLDERS:
                workflows_dir = os.path.join(module_dir, folder_name)
                if os.path.exists(workflows_dir):
                    webapp.add_routes([web.static("/api/workflow_templates/" + module_name, workflows_dir)])

        @routes.get("/i18n")
        async def get_i18n(request):
            return web.json_response(self.build_translations())


# ---------------------------------------------------------------------- /internal sub-app
class InternalRoutes:
    def __init__(self, prompt_server):
        self.routes = web.RouteTableDef()
        self._app: Optional[web.Application] = None
        self.prompt_server = prompt_server
        self.subscriptions: set = set()

    def setup_routes(self):
        @self.routes.get('/logs')
        async def get_logs(request):
            return web.json_response("".join([(entry["t"] + " - " + entry["m"]) for entry in list(_LOGS)]))

        @self.routes.get('/logs/raw')
        async def get_raw_logs(request):
            try:
                size = os.get_terminal_size()
                cols, rows = size.columns, size.lines
            except OSError:
                cols, rows = 80, 24
            return web.json_response({"entries": list(_LOGS), "size": {"cols": cols, "rows": rows}})

        @self.routes.patch('/logs/subscribe')
        async def subscribe_logs(request):
            json_data = await request.json()
            client_id = json_data["clientId"]
            enabled = json_data["enabled"]
            if enabled:
                self.subscriptions.add(client_id)
            else:
                self.subscriptions.discard(client_id)
            return web.Response(status=200)

        @self.routes.get('/folder_paths')
        async def get_folder_paths(request):
            response = {}
            for key in folder_paths.folder_names_and_paths:
                response[key] = folder_paths.folder_names_and_paths[key][0]
            return web.json_response(response)

        @self.routes.get('/files/{directory_type}')
        async def get_files(request: web.Request) -> web.Response:
            directory_type = request.match_info['directory_type']
            if directory_type not in ("output", "input", "temp"):
                return web.json_response({"error": "Invalid directory type"}, status=400)

            directory = folder_paths.get_directory_by_type(directory_type)
            sorted_files = sorted(
                (entry for entry in os.scandir(directory) if entry.is_file() and not entry.name.startswith('.')),
                key=lambda entry: -entry.stat().st_mtime,
            )
            return web.json_response([entry.name for entry in sorted_files], status=200)

    def get_app(self):
        if self._app is None:
            self._app = web.Application()
            self.setup_routes()
            self._app.add_routes(self.routes)
        return self._app


# ---------------------------------------------------------------------- helpers for uploads
def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


class _UploadedFile:
    """The `image` part of an upload, already streamed to a temporary file."""

    def __init__(self, filename: str, tmp_path: str, sha256: str, size: int):
        self.filename = filename
        self.tmp_path = tmp_path
        self.sha256 = sha256
        self.size = size
        self.file = True  # ComfyUI tests `image and image.file`


# ---------------------------------------------------------------------- PromptServer
class PromptServer:
    def __init__(self, loop):
        PromptServer.instance = self

        mimetypes.init()
        mimetypes.types_map['.js'] = 'application/javascript; charset=utf-8'

        capture = _LogCapture()
        capture.setFormatter(logging.Formatter("%(message)s"))
        logging.getLogger().addHandler(capture)

        self.user_manager = UserManager()
        self.model_file_manager = ModelFileManager()
        self.custom_node_manager = CustomNodeManager()
        self.internal_routes = InternalRoutes(self)
        self.supports = ["custom_nodes_from_web"]
        self.prompt_queue = execution.PromptQueue(self)
        self.loop = loop
        self.messages = asyncio.Queue()
        self.client_session: Optional[aiohttp.ClientSession] = None
        self.number = 0

        max_upload_size = round(args.max_upload_size * 1024 * 1024)
        self.handler_counter = HandlerCounter(max_upload_size)
        middlewares = [cache_control, create_origin_only_middleware(), self.handler_counter.middleware()]

        self.app = web.Application(client_max_size=max_upload_size, middlewares=middlewares)
        self.app.on_shutdown.append(self._close_sockets)
        self.sockets = dict()
        self.sockets_metadata = dict()
        self.web_root = args.front_end_root
        logging.info(f"[Prompt Server] web root: {self.web_root}")
        routes = web.RouteTableDef()
        self.routes = routes
        self.last_node_id = None
        self.last_prompt_id = None
        self.client_id = None

        self.on_prompt_handlers = []

        self._system_stats = _load_fixture("system_stats.json")
        self._upload_tmp = os.path.join(folder_paths.base_path, ".standin-uploads")

        @routes.get('/ws')
        async def websocket_handler(request):
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            sid = request.rel_url.query.get('clientId', '')
            if sid:
                # Reusing existing session, remove old
                self.sockets.pop(sid, None)
            else:
                sid = uuid.uuid4().hex

            self.sockets[sid] = ws
            self.sockets_metadata[sid] = {"feature_flags": {}}

            try:
                # Send initial state to the new client
                await self.send("status", {"status": self.get_queue_info(), "sid": sid}, sid)
                # On reconnect if we are the currently executing client send the current node
                if self.client_id == sid and self.last_node_id is not None:
                    await self.send("executing", {"node": self.last_node_id}, sid)

                first_message = True
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.ERROR:
                        logging.warning('ws connection closed with exception %s' % ws.exception())
                    elif msg.type == aiohttp.WSMsgType.TEXT:
                        try:
                            data = json.loads(msg.data)
                            if first_message and data.get("type") == "feature_flags":
                                client_flags = data.get("data", {})
                                if sid in self.sockets_metadata:
                                    self.sockets_metadata[sid]["feature_flags"] = client_flags
                                await self.send("feature_flags", get_server_features(), sid)
                            first_message = False
                        except json.JSONDecodeError:
                            logging.warning(f"Invalid JSON received from client {sid}: {msg.data}")
                        except Exception as e:
                            logging.error(f"Error processing WebSocket message: {e}")
            finally:
                self.sockets.pop(sid, None)
                self.sockets_metadata.pop(sid, None)
            return ws

        @routes.get("/")
        async def get_root(request):
            response = web.FileResponse(os.path.join(self.web_root, "index.html"))
            response.headers['Cache-Control'] = 'no-cache'
            response.headers["Pragma"] = "no-cache"
            response.headers["Expires"] = "0"
            return response

        @routes.get("/embeddings")
        def get_embeddings(request):
            embeddings = folder_paths.get_filename_list("embeddings")
            return web.json_response(list(map(lambda a: os.path.splitext(a)[0], embeddings)))

        @routes.get("/models")
        def list_model_types(request):
            model_types = list(folder_paths.folder_names_and_paths.keys())
            return web.json_response(model_types)

        @routes.get("/models/{folder}")
        async def get_models(request):
            folder = request.match_info.get("folder", None)
            if folder not in folder_paths.folder_names_and_paths:
                return web.Response(status=404)
            files = folder_paths.get_filename_list(folder)
            return web.json_response(files)

        @routes.get("/extensions")
        async def get_extensions(request):
            files = glob.glob(os.path.join(glob.escape(self.web_root), 'extensions/**/*.js'), recursive=True)
            extensions = list(map(lambda f: "/" + os.path.relpath(f, self.web_root).replace("\\", "/"), files))
            for name, dir in nodes.EXTENSION_WEB_DIRS.items():
                files = glob.glob(os.path.join(glob.escape(dir), '**/*.js'), recursive=True)
                extensions.extend(list(map(lambda f: "/extensions/" + urllib.parse.quote(
                    name) + "/" + os.path.relpath(f, dir).replace("\\", "/"), files)))
            return web.json_response(extensions)

        def get_dir_by_type(dir_type):
            if dir_type is None:
                dir_type = "input"

            if dir_type == "input":
                type_dir = folder_paths.get_input_directory()
            elif dir_type == "temp":
                type_dir = folder_paths.get_temp_directory()
            elif dir_type == "output":
                type_dir = folder_paths.get_output_directory()

            return type_dir, dir_type  # an unknown type raises UnboundLocalError (500), as in ComfyUI

        def compare_image_hash(filepath, image):
            if os.path.exists(filepath):
                return _file_sha256(filepath) == image.sha256
            return False

        def image_upload(post, image, image_save_function=None):
            overwrite = post.get("overwrite")
            image_is_duplicate = False

            image_upload_type = post.get("type")
            upload_dir, image_upload_type = get_dir_by_type(image_upload_type)

            if image and image.file:
                filename = image.filename
                if not filename:
                    return web.Response(status=400)

                subfolder = post.get("subfolder", "")
                full_output_folder = os.path.join(upload_dir, os.path.normpath(subfolder))
                filepath = os.path.abspath(os.path.join(full_output_folder, filename))

                if os.path.commonpath((upload_dir, filepath)) != upload_dir:
                    return web.Response(status=400)

                if not os.path.exists(full_output_folder):
                    os.makedirs(full_output_folder)

                split = os.path.splitext(filename)

                if overwrite is not None and (overwrite == "true" or overwrite == "1"):
                    pass
                else:
                    i = 1
                    while os.path.exists(filepath):
                        if compare_image_hash(filepath, image):
                            image_is_duplicate = True
                            break
                        filename = f"{split[0]} ({i}){split[1]}"
                        filepath = os.path.join(full_output_folder, filename)
                        i += 1

                if not image_is_duplicate:
                    if image_save_function is not None:
                        image_save_function(image, post, filepath)
                    else:
                        os.replace(image.tmp_path, filepath)

                return web.json_response({"name": filename, "subfolder": subfolder, "type": image_upload_type})
            else:
                return web.Response(status=400)

        @routes.post("/upload/image")
        async def upload_image(request):
            post, image = await self._read_upload(request)
            try:
                return image_upload(post, image)
            finally:
                self._discard_upload(image)

        @routes.post("/upload/mask")
        async def upload_mask(request):
            post, image = await self._read_upload(request)

            def image_save_function(image, post, filepath):
                original_ref = json.loads(post.get("original_ref"))
                filename, output_dir = folder_paths.annotated_filepath(original_ref['filename'])

                if not filename:
                    return web.Response(status=400)

                # validation for security: prevent accessing arbitrary path
                if filename[0] == '/' or '..' in filename:
                    return web.Response(status=400)

                if output_dir is None:
                    type = original_ref.get("type", "output")
                    output_dir = folder_paths.get_directory_by_type(type)

                if output_dir is None:
                    return web.Response(status=400)

                if original_ref.get("subfolder", "") != "":
                    full_output_dir = os.path.join(output_dir, original_ref["subfolder"])
                    if os.path.commonpath((os.path.abspath(full_output_dir), output_dir)) != output_dir:
                        return web.Response(status=403)
                    output_dir = full_output_dir

                file = os.path.join(output_dir, filename)

                if os.path.isfile(file):
                    # ComfyUI copies the mask's alpha into the original with PIL;
                    # the stand-in stores the uploaded mask bytes as they are.
                    os.replace(image.tmp_path, filepath)

            try:
                return image_upload(post, image, image_save_function)
            finally:
                self._discard_upload(image)

        @routes.get("/view")
        async def view_image(request):
            if "filename" in request.rel_url.query:
                filename = request.rel_url.query["filename"]
                filename, output_dir = folder_paths.annotated_filepath(filename)

                if not filename:
                    return web.Response(status=400)

                # validation for security: prevent accessing arbitrary path
                if filename[0] == '/' or '..' in filename:
                    return web.Response(status=400)

                if output_dir is None:
                    type = request.rel_url.query.get("type", "output")
                    output_dir = folder_paths.get_directory_by_type(type)

                if output_dir is None:
                    return web.Response(status=400)

                if "subfolder" in request.rel_url.query:
                    full_output_dir = os.path.join(output_dir, request.rel_url.query["subfolder"])
                    if os.path.commonpath((os.path.abspath(full_output_dir), output_dir)) != output_dir:
                        return web.Response(status=403)
                    output_dir = full_output_dir

                filename = os.path.basename(filename)
                file = os.path.join(output_dir, filename)

                if os.path.isfile(file):
                    # `preview` / `channel` make ComfyUI re-encode with PIL; the stand-in
                    # always streams the file itself.
                    content_type = mimetypes.guess_type(filename)[0] or 'application/octet-stream'
                    if content_type in {'text/html', 'text/html-sandboxed', 'application/xhtml+xml', 'text/javascript', 'text/css'}:
                        content_type = 'application/octet-stream'
                    return web.FileResponse(
                        file,
                        headers={
                            "Content-Disposition": f"filename=\"{filename}\"",
                            "Content-Type": content_type,
                        },
                    )

            return web.Response(status=404)

        @routes.get("/view_metadata/{folder_name}")
        async def view_metadata(request):
            folder_name = request.match_info.get("folder_name", None)
            if folder_name is None:
                return web.Response(status=404)
            if "filename" not in request.rel_url.query:
                return web.Response(status=404)

            filename = request.rel_url.query["filename"]
            if not filename.endswith(".safetensors"):
                return web.Response(status=404)

            safetensors_path = folder_paths.get_full_path(folder_name, filename)
            if safetensors_path is None:
                return web.Response(status=404)
            out = safetensors_header(safetensors_path, max_size=1024 * 1024)
            if out is None:
                return web.Response(status=404)
            dt = json.loads(out)
            if "__metadata__" not in dt:
                return web.Response(status=404)
            return web.json_response(dt["__metadata__"])

        @routes.get("/system_stats")
        async def system_stats(request):
            stats = copy.deepcopy(self._system_stats)
            stats["system"]["os"] = os.name
            stats["system"]["python_version"] = sys.version
            stats["system"]["embedded_python"] = os.path.split(os.path.split(sys.executable)[0])[1] == "python_embeded"
            stats["system"]["argv"] = sys.argv
            return web.json_response(stats)

        @routes.get("/features")
        async def get_features(request):
            return web.json_response(get_server_features())

        @routes.get("/prompt")
        async def get_prompt(request):
            return web.json_response(self.get_queue_info())

        @routes.get("/object_info")
        async def get_object_info(request):
            out = {}
            for x in nodes.NODE_CLASS_MAPPINGS:
                try:
                    out[x] = nodes.node_info(x)
                except Exception:
                    logging.error(f"[ERROR] An error occurred while retrieving information for the '{x}' node.")
                    logging.error(traceback.format_exc())
            return web.json_response(out)

        @routes.get("/object_info/{node_class}")
        async def get_object_info_node(request):
            node_class = request.match_info.get("node_class", None)
            out = {}
            if (node_class is not None) and (node_class in nodes.NODE_CLASS_MAPPINGS):
                out[node_class] = nodes.node_info(node_class)
            return web.json_response(out)

        @routes.get("/history")
        async def get_history(request):
            max_items = request.rel_url.query.get("max_items", None)
            if max_items is not None:
                max_items = int(max_items)

            offset = request.rel_url.query.get("offset", None)
            if offset is not None:
                offset = int(offset)
            else:
                offset = -1

            return web.json_response(self.prompt_queue.get_history(max_items=max_items, offset=offset))

        @routes.get("/history/{prompt_id}")
        async def get_history_prompt_id(request):
            prompt_id = request.match_info.get("prompt_id", None)
            return web.json_response(self.prompt_queue.get_history(prompt_id=prompt_id))

        @routes.get("/queue")
        async def get_queue(request):
            queue_info = {}
            current_queue = self.prompt_queue.get_current_queue_volatile()
            queue_info['queue_running'] = current_queue[0]
            queue_info['queue_pending'] = current_queue[1]
            return web.json_response(queue_info)

        @routes.post("/prompt")
        async def post_prompt(request):
            logging.info("got prompt")
            json_data = await request.json()
            json_data = self.trigger_on_prompt(json_data)

            if "number" in json_data:
                number = float(json_data['number'])
            else:
                number = self.number
                if "front" in json_data:
                    if json_data['front']:
                        number = -number

                self.number += 1

            if "prompt" in json_data:
                prompt = json_data["prompt"]
                prompt_id = str(json_data.get("prompt_id", uuid.uuid4()))

                partial_execution_targets = None
                if "partial_execution_targets" in json_data:
                    partial_execution_targets = json_data["partial_execution_targets"]

                valid = await execution.validate_prompt(prompt_id, prompt, partial_execution_targets)
                extra_data = {}
                if "extra_data" in json_data:
                    extra_data = json_data["extra_data"]

                if "client_id" in json_data:
                    extra_data["client_id"] = json_data["client_id"]
                if valid[0]:
                    outputs_to_execute = valid[2]
                    self.prompt_queue.put((number, prompt_id, prompt, extra_data, outputs_to_execute))
                    response = {"prompt_id": prompt_id, "number": number, "node_errors": valid[3]}
                    return web.json_response(response)
                else:
                    logging.warning("invalid prompt: {}".format(valid[1]))
                    return web.json_response({"error": valid[1], "node_errors": valid[3]}, status=400)
            else:
                error = {
                    "type": "no_prompt",
                    "message": "No prompt provided",
                    "details": "No prompt provided",
                    "extra_info": {},
                }
                return web.json_response({"error": error, "node_errors": {}}, status=400)

        @routes.post("/queue")
        async def post_queue(request):
            json_data = await request.json()
            if "clear" in json_data:
                if json_data["clear"]:
                    self.prompt_queue.wipe_queue()
            if "delete" in json_data:
                to_delete = json_data['delete']
                for id_to_delete in to_delete:
                    delete_func = lambda a: a[1] == id_to_delete  # noqa: E731
                    self.prompt_queue.delete_queue_item(delete_func)

            return web.Response(status=200)

        @routes.post("/interrupt")
        async def post_interrupt(request):
            try:
                json_data = await request.json()
            except json.JSONDecodeError:
                json_data = {}

            prompt_id = json_data.get('prompt_id')
            if prompt_id:
                currently_running, _ = self.prompt_queue.get_current_queue()
                should_interrupt = False
                for item in currently_running:
                    if item[1] == prompt_id:
                        logging.info(f"Interrupting prompt {prompt_id}")
                        should_interrupt = True
                        break
                if should_interrupt:
                    nodes.interrupt_processing()
                else:
                    logging.info(f"Prompt {prompt_id} is not currently running, skipping interrupt")
            else:
                logging.info("Global interrupt (no prompt_id specified)")
                nodes.interrupt_processing()

            return web.Response(status=200)

        @routes.post("/free")
        async def post_free(request):
            json_data = await request.json()
            unload_models = json_data.get("unload_models", False)
            free_memory = json_data.get("free_memory", False)
            if unload_models:
                self.prompt_queue.set_flag("unload_models", unload_models)
            if free_memory:
                self.prompt_queue.set_flag("free_memory", free_memory)
            return web.Response(status=200)

        @routes.post("/history")
        async def post_history(request):
            json_data = await request.json()
            if "clear" in json_data:
                if json_data["clear"]:
                    self.prompt_queue.wipe_history()
            if "delete" in json_data:
                to_delete = json_data['delete']
                for id_to_delete in to_delete:
                    self.prompt_queue.delete_history_item(id_to_delete)

            return web.Response(status=200)

    # ------------------------------------------------------------------ uploads (streamed)
    async def _read_upload(self, request):
        """Reads an upload form as ComfyUI does, with `await request.post()` (aiohttp spools file
        parts to temporary files, enforces client_max_size, and hands a form parsed earlier, by
        the gate, back as it is); the `image` file is then copied in chunks to its own temporary
        file (flat memory for any size).

        Returns (fields, image): fields maps the first value of each plain field; image is an
        _UploadedFile or None. A non-file first `image` value raises like ComfyUI (500)."""
        post = await request.post()
        fields: dict = {}
        image = None
        for name in post.keys():
            value = post.get(name)
            if name == "image":
                if isinstance(value, str):
                    if value:
                        raise AttributeError("'str' object has no attribute 'file'")
                    continue
                image = self._spool_file(value)
                continue
            fields.setdefault(name, value)
        return fields, image

    def _spool_file(self, field) -> _UploadedFile:
        os.makedirs(self._upload_tmp, exist_ok=True)
        tmp_path = os.path.join(self._upload_tmp, uuid.uuid4().hex + ".part")
        h = hashlib.sha256()
        size = 0
        field.file.seek(0)
        with open(tmp_path, "wb") as f:
            while True:
                chunk = field.file.read(1 << 16)
                if not chunk:
                    break
                h.update(chunk)
                size += len(chunk)
                f.write(chunk)
        return _UploadedFile(field.filename, tmp_path, h.hexdigest(), size)

    @staticmethod
    def _discard_upload(image) -> None:
        if image is not None:
            try:
                os.remove(image.tmp_path)
            except OSError:
                pass

    # ------------------------------------------------------------------ lifecycle
    async def setup(self):
        timeout = aiohttp.ClientTimeout(total=None)
        self.client_session = aiohttp.ClientSession(timeout=timeout)

    async def _close_sockets(self, app):
        for ws in list(self.sockets.values()):
            try:
                await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"Server shutdown")
            except Exception:
                pass

    def add_routes(self):
        self.user_manager.add_routes(self.routes)
        self.model_file_manager.add_routes(self.routes)
        self.custom_node_manager.add_routes(self.routes, self.app, nodes.LOADED_MODULE_DIRS.items())
        self.app.add_subapp('/internal', self.internal_routes.get_app())

        # Prefix every route with /api, as ComfyUI does (static routes are not twinned).
        api_routes = web.RouteTableDef()
        for route in self.routes:
            if isinstance(route, web.RouteDef):
                api_routes.route(route.method, "/api" + route.path)(route.handler, **route.kwargs)
        self.app.add_routes(api_routes)
        self.app.add_routes(self.routes)

        for name, dir in nodes.EXTENSION_WEB_DIRS.items():
            self.app.add_routes([web.static('/extensions/' + name, dir)])

        self.app.add_routes([
            web.static('/', self.web_root),
        ])

    def get_queue_info(self):
        prompt_info = {}
        exec_info = {}
        exec_info['queue_remaining'] = self.prompt_queue.get_tasks_remaining()
        prompt_info['exec_info'] = exec_info
        return prompt_info

    async def send(self, event, data, sid=None):
        if isinstance(data, (bytes, bytearray)):
            await self.send_bytes(event, data, sid)
        else:
            await self.send_json(event, data, sid)

    def encode_bytes(self, event, data):
        if not isinstance(event, int):
            raise RuntimeError(f"Binary event types must be integers, got {event}")
        packed = struct.pack(">I", event)
        message = bytearray(packed)
        message.extend(data)
        return message

    async def send_bytes(self, event, data, sid=None):
        message = self.encode_bytes(event, data)
        if sid is None:
            sockets = list(self.sockets.values())
            for ws in sockets:
                await send_socket_catch_exception(ws.send_bytes, message)
        elif sid in self.sockets:
            await send_socket_catch_exception(self.sockets[sid].send_bytes, message)

    async def send_json(self, event, data, sid=None):
        message = {"type": event, "data": data}
        if sid is None:
            sockets = list(self.sockets.values())
            for ws in sockets:
                await send_socket_catch_exception(ws.send_json, message)
        elif sid in self.sockets:
            await send_socket_catch_exception(self.sockets[sid].send_json, message)

    def send_sync(self, event, data, sid=None):
        self.loop.call_soon_threadsafe(self.messages.put_nowait, (event, data, sid))

    def queue_updated(self):
        self.send_sync("status", {"status": self.get_queue_info()})

    async def publish_loop(self):
        while True:
            msg = await self.messages.get()
            try:
                await self.send(*msg)
            except Exception:
                logging.exception("publish_loop: send failed")

    def add_on_prompt_handler(self, handler):
        self.on_prompt_handlers.append(handler)

    def trigger_on_prompt(self, json_data):
        for handler in self.on_prompt_handlers:
            try:
                json_data = handler(json_data)
            except Exception:
                logging.warning("[ERROR] An error occurred during the on_prompt_handler processing")
                logging.warning(traceback.format_exc())

        return json_data

    def send_progress_text(self, text, node_id, sid=None):
        if isinstance(text, str):
            text = text.encode("utf-8")
        node_id_bytes = str(node_id).encode("utf-8")
        message = struct.pack(">I", len(node_id_bytes)) + node_id_bytes + text
        self.send_sync(BinaryEventTypes.TEXT, message, sid)


def safetensors_header(safetensors_path, max_size=100 * 1024 * 1024):
    with open(safetensors_path, "rb") as f:
        header = f.read(8)
        length_of_header = struct.unpack('<Q', header)[0]
        if length_of_header > max_size:
            return None
        return f.read(length_of_header)
