"""HTTP side of prompts: /prompt, /object_info, /queue, /history, /interrupt, /free.

Guarantees (README "Prompts" and "Compared with the real host"):
* `POST /prompt` runs the on-prompt handlers first, then takes a number (every POST without
  an explicit `number` uses one, rejected ones too), then validates.
* `/object_info` is read again on every request (file lists come from the disk), and its
  GET handler never touches its request: the plugin calls it with `None`.
* Bodies are read with `request.json()`, so malformed JSON is aiohttp's own 500.
"""
from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from aiohttp import web

import execution
import nodes

log = logging.getLogger("standin.prompts")


def _all_node_info() -> dict[str, Any]:
    out = {}
    for name in list(nodes.NODE_CLASS_MAPPINGS):
        try:
            out[name] = nodes.node_info(name)
        except Exception:  # one broken custom node must not hide the others
            log.exception("object_info: describing %s failed; it is left out", name)
    return out


def _done() -> web.Response:
    # the host answers these POSTs with a bare 200 and no body
    return web.Response()


def register(ps: Any, routes: web.RouteTableDef) -> None:
    queue = ps.prompt_queue

    @routes.get("/prompt")
    async def prompt_info(request):
        return web.json_response(ps.get_queue_info())

    @routes.get("/object_info")
    async def object_info(request):
        return web.json_response(_all_node_info())

    @routes.get("/object_info/{node_class}")
    async def object_info_one(request):
        name = request.match_info.get("node_class")
        if name in nodes.NODE_CLASS_MAPPINGS:
            return web.json_response({name: nodes.node_info(name)})
        return web.json_response({})

    @routes.get("/history")
    async def history(request):
        limit = request.rel_url.query.get("max_items")
        offset = int(request.rel_url.query.get("offset", -1))
        return web.json_response(queue.get_history(max_items=int(limit) if limit is not None else None, offset=offset))

    @routes.get("/history/{prompt_id}")
    async def history_one(request):
        return web.json_response(queue.get_history(prompt_id=request.match_info["prompt_id"]))

    @routes.get("/queue")
    async def queue_view(request):
        running, pending = queue.get_current_queue()
        return web.json_response({"queue_running": running, "queue_pending": pending})

    @routes.post("/prompt")
    async def queue_prompt(request):
        body = ps.trigger_on_prompt(await request.json())
        if "number" in body:
            number = float(body["number"])
        else:
            number = -ps.number if body.get("front") else ps.number
            ps.number += 1
        if "prompt" not in body:
            problem = {"type": "no_prompt", "message": "No prompt provided", "details": "No prompt provided", "extra_info": {}}
            return web.json_response({"error": problem, "node_errors": {}}, status=400)
        prompt = body["prompt"]
        prompt_id = str(body.get("prompt_id", uuid.uuid4()))
        ok, problem, outputs, node_errors = execution.validate_prompt(prompt_id, prompt, body.get("partial_execution_targets"))
        if not ok:
            log.warning("invalid prompt: %s", problem)
            return web.json_response({"error": problem, "node_errors": node_errors}, status=400)
        extra = body.get("extra_data", {})
        if "client_id" in body:  # present wins, even null
            extra["client_id"] = body["client_id"]
        queue.put([number, prompt_id, prompt, extra, outputs])
        return web.json_response({"prompt_id": prompt_id, "number": number, "node_errors": node_errors})

    @routes.post("/queue")
    async def edit_queue(request):
        body = await request.json()
        if body.get("clear"):
            queue.wipe_queue()
        for prompt_id in body.get("delete", []):
            queue.delete_queue_item(prompt_id)
        return _done()

    @routes.post("/interrupt")
    async def interrupt(request):
        raw = await request.read()
        body = json.loads(raw) if raw else {}
        target = body.get("prompt_id") if isinstance(body, dict) else None
        if target is None or target in queue.running_prompt_ids():
            nodes.interrupt_processing(True)
        return _done()

    @routes.post("/free")
    async def free(request):
        await request.json()  # nothing is loaded, so there is nothing to free
        return _done()

    @routes.post("/history")
    async def edit_history(request):
        body = await request.json()
        if body.get("clear"):
            queue.wipe_history()
        for prompt_id in body.get("delete", []):
            queue.delete_history_item(prompt_id)
        return _done()
