"""ComfyUI 0.3.64 stand-in: entry point.

    python3 main.py --base-dir DIR --listen 127.0.0.1 --port P [--control-port C] [--multi-user]

Startup follows ComfyUI's main.py: prestartup scripts, PromptServer, custom nodes
(DIR/custom_nodes), add_routes(), then the site. Prints `STANDIN READY http://HOST:PORT`
once listening (and `STANDIN CONTROL http://127.0.0.1:C` for the control server).
SIGTERM / SIGINT: graceful stop through web.AppRunner.cleanup() (on_shutdown / on_cleanup run).
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# `import server` / `folder_paths` / `nodes` / `execution` must resolve to the stand-in
if sys.path[:1] != [HERE]:
    sys.path.insert(0, HERE)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

import folder_paths  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="ComfyUI 0.3.64 stand-in")
    p.add_argument("--base-dir", required=True, help="ComfyUI base directory (models/, input/, output/, temp/, user/, custom_nodes/)")
    p.add_argument("--listen", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8188, help="0 picks a free port")
    p.add_argument("--control-port", type=int, default=None, help="stand-in control server on 127.0.0.1 (0 picks a free port)")
    p.add_argument("--multi-user", action="store_true", help="per-user userdata from the comfy-user header (ComfyUI's --multi-user)")
    p.add_argument("--front-end-root", default=None, help="web root (default: the stand-in's web/)")
    p.add_argument("--verbose", action="store_true", help="debug logging")
    # `npm start -- --cpu ...` passes ComfyUI's own flags; the stand-in has no use for most of them
    ns, ignored = p.parse_known_args(argv)
    if ignored:
        print(f"stand-in: ignoring ComfyUI flags it does not implement: {' '.join(ignored)}", file=sys.stderr, flush=True)
    return ns


def _aiohttp_version() -> tuple[int, ...]:
    out = []
    for part in aiohttp.__version__.split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def _url(host: str, port: int) -> str:
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def build_control_app(ps) -> web.Application:
    """Stand-in only: a separate app on 127.0.0.1 that the gate never sees."""
    import loader

    counter = ps.handler_counter
    routes = web.RouteTableDef()

    @routes.get("/counter")
    async def get_counter(request):
        return web.json_response({"total": counter.total, "by_route": dict(counter.by_route)})

    @routes.post("/counter/reset")
    async def reset_counter(request):
        counter.reset()
        return web.json_response({"total": 0, "by_route": {}})

    @routes.get("/last-request")
    async def last_request(request):
        return web.json_response(counter.last)

    @routes.get("/requests")
    async def recent_requests(request):
        return web.json_response(list(counter.recent))

    @routes.get("/history-raw")
    async def history_raw(request):
        return web.json_response(ps.prompt_queue.history, dumps=lambda o: __import__("json").dumps(o, default=str))

    @routes.get("/queue-raw")
    async def queue_raw(request):
        running, pending = ps.prompt_queue.get_current_queue()
        return web.json_response({"queue_running": running, "queue_pending": pending})

    @routes.get("/routes")
    async def route_table(request):
        out = []
        for route in ps.app.router.routes():
            resource = route.resource
            out.append({"method": route.method, "path": resource.canonical if resource is not None else None,
                        "kind": type(resource).__name__})
        return web.json_response(out)

    @routes.get("/middlewares")
    async def middlewares(request):
        return web.json_response([getattr(m, "__qualname__", repr(m)) for m in ps.app.middlewares])

    @routes.get("/sockets")
    async def sockets(request):
        return web.json_response(list(ps.sockets.keys()))

    @routes.get("/imports")
    async def imports(request):
        return web.json_response([{"path": p, "seconds": t, "success": ok} for (t, p, ok) in loader.IMPORT_RESULTS])

    app = web.Application()
    app.add_routes(routes)
    return app


async def run(ps, ns) -> int:
    import execution

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass

    await ps.setup()
    worker = execution.start_prompt_worker(ps.prompt_queue, ps)
    publisher = asyncio.ensure_future(ps.publish_loop())

    shutdown_timeout = 5.0
    if _aiohttp_version() >= (3, 9):
        runner = web.AppRunner(ps.app, access_log=None, shutdown_timeout=shutdown_timeout)
        site_kwargs = {}
    else:
        runner = web.AppRunner(ps.app, access_log=None)
        site_kwargs = {"shutdown_timeout": shutdown_timeout}
    await runner.setup()  # runs app.on_startup
    site = web.TCPSite(runner, ns.listen, ns.port, **site_kwargs)
    await site.start()
    port = runner.addresses[0][1]
    ps.address, ps.port = ns.listen, port

    control_runner = None
    if ns.control_port is not None:
        control_runner = web.AppRunner(build_control_app(ps), access_log=None)
        await control_runner.setup()
        await web.TCPSite(control_runner, "127.0.0.1", ns.control_port).start()
        print(f"STANDIN CONTROL {_url('127.0.0.1', control_runner.addresses[0][1])}", flush=True)
    print(f"STANDIN READY {_url(ns.listen, port)}", flush=True)

    await stop.wait()
    logging.info("stand-in: stopping")

    await loop.run_in_executor(None, execution.stop_prompt_worker, ps.prompt_queue, worker)
    await runner.cleanup()  # on_shutdown (closes sockets), then on_cleanup
    if control_runner is not None:
        await control_runner.cleanup()
    publisher.cancel()
    try:
        await publisher
    except (asyncio.CancelledError, Exception):
        pass
    if ps.client_session is not None:
        await ps.client_session.close()
    return 0


def main(argv=None) -> int:
    ns = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if ns.verbose else logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

    base = os.path.abspath(ns.base_dir)
    folder_paths.set_base_path(base)
    for paths, _exts in folder_paths.folder_names_and_paths.values():
        for p in paths:
            os.makedirs(p, exist_ok=True)
    for d in (folder_paths.get_input_directory(), folder_paths.get_output_directory(),
              folder_paths.get_temp_directory(), folder_paths.get_user_directory()):
        os.makedirs(d, exist_ok=True)

    import server  # noqa: E402  (after folder_paths is rooted)
    import loader  # noqa: E402
    import nodes  # noqa: E402

    server.args.multi_user = ns.multi_user
    server.args.listen = ns.listen
    server.args.port = ns.port
    if ns.front_end_root:
        server.args.front_end_root = os.path.abspath(ns.front_end_root)

    loader.execute_prestartup_scripts()

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    ps = server.PromptServer(loop)

    nodes.init_builtin_nodes()
    loader.init_external_custom_nodes()
    ps.add_routes()

    try:
        return loop.run_until_complete(run(ps, ns))
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


if __name__ == "__main__":
    sys.exit(main())
