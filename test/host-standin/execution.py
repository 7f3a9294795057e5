"""Stand-in for ComfyUI's `execution` module: PromptQueue, validate_prompt and a fake executor.

The executor walks the graph like ComfyUI (outputs first, dependencies depth-first,
identical nodes served from the cache of the previous prompt), emits the same
WebSocket messages in the same order as a real 0.3.64 run (fixtures/ws-transcript.jsonl),
writes a tiny real PNG per image for SaveImage / PreviewImage and stores the history
entry in the shape of fixtures/history.json. Other nodes do nothing but pass values on.
"""
from __future__ import annotations

import asyncio
import copy
import heapq
import json
import logging
import os
import random
import struct
import sys
import threading
import time
import traceback
import zlib
from typing import Any, NamedTuple

import folder_paths
import nodes

SENSITIVE_EXTRA_DATA_KEYS = ("auth_token_comfy_org", "api_key_comfy_org")
MAXIMUM_HISTORY_SIZE = 10000
# pause between taking a prompt off the queue and starting it
EXEC_DELAY_SECONDS = float(os.environ.get("STANDIN_EXEC_DELAY", "0.01"))


def full_type_name(klass) -> str:
    module = klass.__module__
    if module == 'builtins':
        return klass.__qualname__
    return module + '.' + klass.__qualname__


# ====================================================================== queue
class PromptQueue:
    class ExecutionStatus(NamedTuple):
        status_str: str
        completed: bool
        messages: list

    def __init__(self, server):
        self.server = server
        self.mutex = threading.RLock()
        self.not_empty = threading.Condition(self.mutex)
        self.task_counter = 0
        self.queue: list = []
        self.currently_running: dict = {}
        self.history: dict = {}
        self.flags: dict = {}
        self.closed = False  # stand-in only: set by close() so that the worker thread ends

    def put(self, item) -> None:
        with self.mutex:
            heapq.heappush(self.queue, item)
            self.server.queue_updated()
            self.not_empty.notify()

    def get(self, timeout=None):
        """Blocks the calling (worker) thread until a prompt is queued; marks it running.
        None after `timeout` seconds without one, or once the queue is closed."""
        with self.not_empty:
            if not self.queue and not self.closed:
                self.not_empty.wait_for(lambda: self.queue or self.closed, timeout=timeout)
            if not self.queue or self.closed:
                return None
            item = heapq.heappop(self.queue)
            number = self.task_counter
            self.task_counter += 1
            self.currently_running[number] = copy.deepcopy(item)
            self.server.queue_updated()
            return (item, number)

    def close(self) -> None:
        with self.not_empty:
            self.closed = True
            self.not_empty.notify_all()

    def task_done(self, item_id, history_result, status: "PromptQueue.ExecutionStatus | None", process_item=None) -> None:
        with self.mutex:
            prompt = self.currently_running.pop(item_id)
            if len(self.history) > MAXIMUM_HISTORY_SIZE:
                self.history.pop(next(iter(self.history)))
            status_dict = None
            if status is not None:
                status_dict = copy.deepcopy(status._asdict())
            if process_item is not None:
                prompt = process_item(prompt)
            self.history[prompt[1]] = {
                "prompt": prompt,
                "outputs": {},
                "status": status_dict,
            }
            self.history[prompt[1]].update(history_result)
            self.server.queue_updated()

    def get_current_queue(self):
        with self.mutex:
            out = []
            for x in self.currently_running.values():
                out += [x]
            return (out, copy.deepcopy(self.queue))

    def get_current_queue_volatile(self):
        with self.mutex:
            running = [x for x in self.currently_running.values()]
            queued = copy.copy(self.queue)
            return (running, queued)

    def get_tasks_remaining(self) -> int:
        with self.mutex:
            return len(self.queue) + len(self.currently_running)

    def wipe_queue(self) -> None:
        with self.mutex:
            self.queue = []
            self.server.queue_updated()

    def delete_queue_item(self, function) -> bool:
        with self.mutex:
            for x in range(len(self.queue)):
                if function(self.queue[x]):
                    if len(self.queue) == 1:
                        self.wipe_queue()
                    else:
                        self.queue.pop(x)
                        heapq.heapify(self.queue)
                    self.server.queue_updated()
                    return True
        return False

    def get_history(self, prompt_id=None, max_items=None, offset=-1, map_function=None):
        with self.mutex:
            if prompt_id is None:
                out = {}
                i = 0
                if offset < 0 and max_items is not None:
                    offset = len(self.history) - max_items
                for k in self.history:
                    if i >= offset:
                        p = self.history[k]
                        if map_function is not None:
                            p = map_function(p)
                        out[k] = p
                        if max_items is not None and len(out) >= max_items:
                            break
                    i += 1
                return out
            elif prompt_id in self.history:
                p = self.history[prompt_id]
                if map_function is None:
                    p = copy.deepcopy(p)
                else:
                    p = map_function(p)
                return {prompt_id: p}
            else:
                return {}

    def wipe_history(self) -> None:
        with self.mutex:
            self.history = {}

    def delete_history_item(self, id_to_delete) -> None:
        with self.mutex:
            self.history.pop(id_to_delete, None)

    def set_flag(self, name, data) -> None:
        with self.mutex:
            self.flags[name] = data
            self.not_empty.notify()

    def get_flags(self, reset=True):
        with self.mutex:
            if reset:
                ret = self.flags
                self.flags = {}
                return ret
            return self.flags.copy()


def remove_sensitive(item):
    """History keeps the queue item minus the comfy.org secrets of extra_data."""
    extra = item[3]
    if isinstance(extra, dict):
        extra = {k: v for k, v in extra.items() if k not in SENSITIVE_EXTRA_DATA_KEYS}
    return tuple(item[:3]) + (extra,) + tuple(item[4:])


# ====================================================================== validation
def get_input_info(class_inputs, input_name):
    input_category = None
    input_info = None
    for category in ("required", "optional", "hidden"):
        section = class_inputs.get(category) or {}
        if input_name in section:
            input_category = category
            input_info = section[input_name]
            break
    if input_info is None:
        return None, None, None
    input_type = input_info[0] if isinstance(input_info, (list, tuple)) else input_info
    extra_info = input_info[1] if isinstance(input_info, (list, tuple)) and len(input_info) > 1 else {}
    return input_type, input_category, extra_info


def validate_node_input(received_type, input_type, strict=False) -> bool:
    if not received_type != input_type:
        return True
    if not isinstance(received_type, str) or not isinstance(input_type, str):
        return False
    received_types = set(t.strip() for t in received_type.split(","))
    input_types = set(t.strip() for t in input_type.split(","))
    if "*" in received_types or "*" in input_types:
        return True
    if received_types == input_types:
        return True
    if strict:
        return received_types.issubset(input_types)
    return len(received_types.intersection(input_types)) > 0


def _is_link(val) -> bool:
    return isinstance(val, list)


def validate_inputs(prompt, item, validated):
    unique_id = item
    if unique_id in validated:
        return validated[unique_id]

    inputs = prompt[unique_id]['inputs']
    class_type = prompt[unique_id]['class_type']
    class_inputs = nodes.node_info(class_type)["input"]
    valid_inputs = list((class_inputs.get('required') or {}).keys()) + \
        [k for k in (class_inputs.get('optional') or {}).keys() if k not in (class_inputs.get('required') or {})]

    errors = []
    valid = True

    for x in valid_inputs:
        input_type, input_category, extra_info = get_input_info(class_inputs, x)
        assert extra_info is not None
        if x not in inputs:
            if input_category == "required":
                errors.append({
                    "type": "required_input_missing",
                    "message": "Required input is missing",
                    "details": f"{x}",
                    "extra_info": {"input_name": x},
                })
            continue

        val = inputs[x]
        info = (input_type, extra_info)
        if _is_link(val):
            if len(val) != 2:
                errors.append({
                    "type": "bad_linked_input",
                    "message": "Bad linked input, must be a length-2 list of [node_id, slot_index]",
                    "details": f"{x}",
                    "extra_info": {"input_name": x, "input_config": info, "received_value": val},
                })
                continue

            o_id = val[0]
            o_class_type = prompt[o_id]['class_type']
            r = nodes.node_info(o_class_type)["output"]
            received_type = r[val[1]]
            if not validate_node_input(received_type, input_type):
                details = f"{x}, received_type({received_type}) mismatch input_type({input_type})"
                errors.append({
                    "type": "return_type_mismatch",
                    "message": "Return type mismatch between linked nodes",
                    "details": details,
                    "extra_info": {"input_name": x, "input_config": info, "received_type": received_type, "linked_node": val},
                })
                continue
            try:
                r = validate_inputs(prompt, o_id, validated)
                if r[0] is False:
                    valid = False
                    continue
            except Exception as ex:
                typ, _, tb = sys.exc_info()
                valid = False
                reasons = [{
                    "type": "exception_during_inner_validation",
                    "message": "Exception when validating inner node",
                    "details": str(ex),
                    "extra_info": {
                        "input_name": x, "input_config": info, "exception_message": str(ex),
                        "exception_type": full_type_name(typ), "traceback": traceback.format_tb(tb), "linked_node": val,
                    },
                }]
                validated[o_id] = (False, reasons, o_id)
                continue
        else:
            try:
                if input_type == "INT":
                    val = int(val)
                    inputs[x] = val
                if input_type == "FLOAT":
                    val = float(val)
                    inputs[x] = val
                if input_type == "STRING":
                    val = str(val)
                    inputs[x] = val
                if input_type == "BOOLEAN":
                    val = bool(val)
                    inputs[x] = val
            except Exception as ex:
                errors.append({
                    "type": "invalid_input_type",
                    "message": f"Failed to convert an input value to a {input_type} value",
                    "details": f"{x}, {val}, {ex}",
                    "extra_info": {"input_name": x, "input_config": info, "received_value": val, "exception_message": str(ex)},
                })
                continue

            if input_type in ("INT", "FLOAT"):
                if "min" in extra_info and val < extra_info["min"]:
                    errors.append({
                        "type": "value_smaller_than_min",
                        "message": "Value {} smaller than min of {}".format(val, extra_info["min"]),
                        "details": f"{x}",
                        "extra_info": {"input_name": x, "input_config": info, "received_value": val},
                    })
                    continue
                if "max" in extra_info and val > extra_info["max"]:
                    errors.append({
                        "type": "value_bigger_than_max",
                        "message": "Value {} bigger than max of {}".format(val, extra_info["max"]),
                        "details": f"{x}",
                        "extra_info": {"input_name": x, "input_config": info, "received_value": val},
                    })
                    continue

            if isinstance(input_type, list) or input_type == "COMBO":
                combo_options = extra_info.get("options", []) if input_type == "COMBO" else input_type
                is_multiselect = extra_info.get("multiselect", False)
                if is_multiselect and isinstance(val, list):
                    invalid_vals = [v for v in val if v not in combo_options]
                else:
                    invalid_vals = [val] if val not in combo_options else []
                if invalid_vals:
                    input_config = info
                    if len(combo_options) > 20:
                        list_info = f"(list of length {len(combo_options)})"
                        input_config = None
                    else:
                        list_info = str(combo_options)
                    value_str = f"'{invalid_vals[0]}'" if len(invalid_vals) == 1 else str(invalid_vals)
                    errors.append({
                        "type": "value_not_in_list",
                        "message": "Value not in list",
                        "details": f"{x}: {value_str} not in {list_info}",
                        "extra_info": {"input_name": x, "input_config": input_config, "received_value": val},
                    })
                    continue

    if len(errors) > 0 or valid is not True:
        ret = (False, errors, unique_id)
    else:
        ret = (True, [], unique_id)
    validated[unique_id] = ret
    return ret


async def validate_prompt(prompt_id, prompt, partial_execution_list):
    outputs = []
    for x in prompt:
        if 'class_type' not in prompt[x]:
            error = {
                "type": "invalid_prompt",
                "message": "Cannot execute because a node is missing the class_type property.",
                "details": f"Node ID '#{x}'",
                "extra_info": {},
            }
            return (False, error, [], {})

        class_type = prompt[x]['class_type']
        class_ = nodes.NODE_CLASS_MAPPINGS.get(class_type, None)
        if class_ is None:
            error = {
                "type": "invalid_prompt",
                "message": f"Cannot execute because node {class_type} does not exist.",
                "details": f"Node ID '#{x}'",
                "extra_info": {},
            }
            return (False, error, [], {})

        if hasattr(class_, 'OUTPUT_NODE') and class_.OUTPUT_NODE is True:
            if partial_execution_list is None or x in partial_execution_list:
                if x not in outputs:
                    outputs.append(x)

    if len(outputs) == 0:
        error = {
            "type": "prompt_no_outputs",
            "message": "Prompt has no outputs",
            "details": "",
            "extra_info": {},
        }
        return (False, error, [], {})

    good_outputs = []
    errors = []
    node_errors: dict = {}
    validated: dict = {}
    for o in outputs:
        valid = False
        reasons = []
        try:
            m = validate_inputs(prompt, o, validated)
            valid = m[0]
            reasons = m[1]
        except Exception as ex:
            typ, _, tb = sys.exc_info()
            valid = False
            reasons = [{
                "type": "exception_during_validation",
                "message": "Exception when validating node",
                "details": str(ex),
                "extra_info": {"exception_type": full_type_name(typ), "traceback": traceback.format_tb(tb)},
            }]
            validated[o] = (False, reasons, o)

        if valid is True:
            good_outputs.append(o)
        else:
            errors += [(o, reasons)]
            for node_id, result in validated.items():
                valid = result[0]
                reasons = result[1]
                if valid is not True and len(reasons) > 0:
                    if node_id not in node_errors:
                        class_type = prompt[node_id]['class_type']
                        node_errors[node_id] = {
                            "errors": reasons,
                            "dependent_outputs": [],
                            "class_type": class_type,
                        }
                    node_errors[node_id]["dependent_outputs"].append(o)
            logging.error("Failed to validate prompt for output %s", o)

    if len(good_outputs) == 0:
        errors_list = []
        for o, errors_ in errors:
            for error in errors_:
                errors_list.append(f"{error['message']}: {error['details']}")
        error = {
            "type": "prompt_outputs_failed_validation",
            "message": "Prompt outputs failed validation",
            "details": "\n".join(errors_list),
            "extra_info": {},
        }
        return (False, error, list(good_outputs), node_errors)

    return (True, None, list(good_outputs), node_errors)


# ====================================================================== PNG
def make_png(width: int, height: int, rgb: tuple[int, int, int], text: dict[str, str] | None = None) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    for key, value in (text or {}).items():
        out += chunk(b"tEXt", key.encode("latin-1") + b"\x00" + value.encode("latin-1", "replace"))
    out += chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    return out


MAX_PNG_SIDE = 16
MAX_BATCH = 64


class FakeImage(dict):
    """What flows on IMAGE links: {"width", "height", "batch", "color"} (0xRRGGBB)."""


def _image(value) -> FakeImage:
    if isinstance(value, FakeImage):
        return value
    return FakeImage(width=8, height=8, batch=1, color=0x808080)


class InterruptProcessingException(Exception):
    pass


# ====================================================================== executor
class PromptExecutor:
    def __init__(self, server):
        self.server = server
        self.cache: dict = {}  # signature -> {"outputs": tuple, "ui": dict | None}
        self.reset()

    def reset(self):
        self.status_messages: list = []
        self.success = True
        self.history_result: dict = {"outputs": {}, "meta": {}}

    def add_message(self, event, data: dict, broadcast: bool):
        data = {**data, "timestamp": int(time.time() * 1000)}
        self.status_messages.append((event, data))
        if self.server.client_id is not None or broadcast:
            self.server.send_sync(event, data, self.server.client_id)

    # -- graph helpers
    def _signature(self, prompt, node_id, memo, nonce):
        if node_id in memo:
            return memo[node_id]
        node = prompt[node_id]
        class_type = node["class_type"]
        parts: list[Any] = [class_type]
        cls = nodes.NODE_CLASS_MAPPINGS.get(class_type)
        if class_type == "StandinSleep" or (cls is not None and hasattr(cls, "IS_CHANGED") and not nodes.is_builtin(class_type)):
            parts.append(("never-cached", nonce, node_id))
        for k in sorted(node.get("inputs", {})):
            v = node["inputs"][k]
            if _is_link(v) and len(v) == 2 and v[0] in prompt:
                parts.append((k, "link", self._signature(prompt, v[0], memo, nonce), v[1]))
            else:
                parts.append((k, json.dumps(v, sort_keys=True, default=str)))
        sig = json.dumps(parts, default=str)
        memo[node_id] = sig
        return sig

    def _progress_state(self, prompt_id, states):
        nodes_ = {}
        for nid, st in states.items():
            nodes_[nid] = {
                "value": st["value"], "max": st["max"], "state": st["state"],
                "node_id": nid, "prompt_id": prompt_id, "display_node_id": nid,
                "parent_node_id": None, "real_node_id": nid,
            }
        self.server.send_sync("progress_state", {"prompt_id": prompt_id, "nodes": nodes_}, self.server.client_id)

    async def execute(self, prompt, prompt_id, extra_data=None, execute_outputs=None):
        if extra_data is None:
            extra_data = {}
        if execute_outputs is None:
            execute_outputs = []
        nodes.interrupt_processing(False)
        self.reset()
        server = self.server
        server.client_id = extra_data.get("client_id") if isinstance(extra_data, dict) else None

        self.add_message("execution_start", {"prompt_id": prompt_id}, broadcast=False)

        nonce = f"{prompt_id}:{time.monotonic_ns()}"
        memo: dict = {}
        sigs = {}
        for nid in prompt:
            try:
                sigs[nid] = self._signature(prompt, nid, memo, nonce)
            except Exception:
                sigs[nid] = f"unhashable:{nonce}:{nid}"
        # the cache keeps only what the current prompt can use (ComfyUI's classic cache)
        current = set(sigs.values())
        self.cache = {s: v for s, v in self.cache.items() if s in current}

        cached_nodes = [nid for nid in prompt if sigs[nid] in self.cache]
        self.add_message("execution_cached", {"nodes": cached_nodes, "prompt_id": prompt_id}, broadcast=False)
        cached = set(cached_nodes)

        # execution order: outputs (even cached), dependencies first, cached deps not visited
        order: list[str] = []
        seen: set[str] = set()

        def visit(nid):
            if nid in seen:
                return
            seen.add(nid)
            if nid not in cached:
                for v in prompt[nid].get("inputs", {}).values():
                    if _is_link(v) and len(v) == 2 and v[0] in prompt and v[0] not in cached:
                        visit(v[0])
            order.append(nid)

        for o in execute_outputs:
            if o in prompt:
                visit(o)

        values: dict[str, tuple] = {}
        ui_outputs: dict[str, dict] = {}
        meta_outputs: dict[str, dict] = {}
        executed: set[str] = set()
        states: dict[str, dict] = {}
        current_node = None
        current_inputs: dict = {}

        def output_of(nid, idx):
            if nid not in values:
                entry = self.cache.get(sigs.get(nid))
                if entry is not None:
                    values[nid] = entry["outputs"]
            outs = values.get(nid) or ()
            try:
                return outs[idx]
            except (IndexError, TypeError):
                return None

        try:
            for nid in order:
                node = prompt[nid]
                class_type = node["class_type"]
                current_node = nid
                if nid in cached:
                    entry = self.cache[sigs[nid]]
                    values[nid] = entry["outputs"]
                    if server.client_id is not None:
                        server.send_sync("executed", {"node": nid, "display_node": nid, "output": entry["ui"],
                                                      "prompt_id": prompt_id}, server.client_id)
                    if entry["ui"] is not None:
                        ui_outputs[nid] = entry["ui"]
                        meta_outputs[nid] = {"node_id": nid, "display_node": nid, "parent_node": None, "real_node_id": nid}
                    states[nid] = {"value": 1.0, "max": 1.0, "state": "finished"}
                    self._progress_state(prompt_id, states)
                    executed.add(nid)
                    continue

                if nodes.processing_interrupted():
                    raise InterruptProcessingException()

                inputs = {}
                for k, v in node.get("inputs", {}).items():
                    if _is_link(v) and len(v) == 2:
                        inputs[k] = output_of(v[0], v[1])
                    else:
                        inputs[k] = v
                current_inputs = inputs

                states[nid] = {"value": 0.0, "max": 1.0, "state": "running"}
                self._progress_state(prompt_id, states)
                # like ComfyUI: no client_id, no `executing` (progress_state is what broadcasts)
                if server.client_id is not None:
                    server.last_node_id = nid
                    server.send_sync("executing", {"node": nid, "display_node": nid, "prompt_id": prompt_id}, server.client_id)

                outs, ui = await self._run_node(prompt, prompt_id, nid, class_type, inputs, extra_data)
                values[nid] = outs
                if ui is not None:
                    ui_outputs[nid] = ui
                    meta_outputs[nid] = {"node_id": nid, "display_node": nid, "parent_node": None, "real_node_id": nid}
                    if server.client_id is not None:
                        server.send_sync("executed", {"node": nid, "display_node": nid, "output": ui, "prompt_id": prompt_id},
                                         server.client_id)
                self.cache[sigs[nid]] = {"outputs": outs, "ui": ui}
                executed.add(nid)
                states[nid] = {"value": 1.0, "max": 1.0, "state": "finished"}
                self._progress_state(prompt_id, states)
        except InterruptProcessingException:
            self.success = False
            self.add_message("execution_interrupted", {
                "prompt_id": prompt_id,
                "node_id": current_node,
                "node_type": prompt[current_node]["class_type"] if current_node in prompt else None,
                "executed": list(executed),
            }, broadcast=True)
        except asyncio.CancelledError:
            raise
        except Exception as ex:
            typ, _, tb = sys.exc_info()
            logging.error("!!! Exception during processing !!! %s", ex)
            self.success = False
            self.add_message("execution_error", {
                "prompt_id": prompt_id,
                "node_id": current_node,
                "node_type": prompt[current_node]["class_type"] if current_node in prompt else None,
                "executed": list(executed),
                "exception_message": str(ex),
                "exception_type": full_type_name(typ),
                "traceback": traceback.format_tb(tb),
                "current_inputs": {k: [repr(v)] for k, v in current_inputs.items()},
                "current_outputs": list(values.keys()),
            }, broadcast=False)

        if self.success:
            self.add_message("execution_success", {"prompt_id": prompt_id}, broadcast=False)
        server.last_node_id = None
        self.history_result = {"outputs": ui_outputs, "meta": meta_outputs}

    # -- node implementations
    async def _run_node(self, prompt, prompt_id, nid, class_type, inputs, extra_data):
        server = self.server
        info = nodes.node_info(class_type)
        n_out = len(info.get("output") or [])

        if class_type == "EmptyImage":
            img = FakeImage(width=int(inputs.get("width") or 512), height=int(inputs.get("height") or 512),
                            batch=int(inputs.get("batch_size") or 1), color=int(inputs.get("color") or 0))
            return (img,), None
        if class_type in ("ImageScale", "ImageScaleBy", "ImageUpscaleWithModel"):
            img = FakeImage(_image(inputs.get("image")))
            if class_type == "ImageScale":
                img["width"] = int(inputs.get("width") or img["width"])
                img["height"] = int(inputs.get("height") or img["height"])
            elif class_type == "ImageScaleBy":
                f = float(inputs.get("scale_by") or 1.0)
                img["width"], img["height"] = int(img["width"] * f), int(img["height"] * f)
            else:
                img["width"], img["height"] = img["width"] * 4, img["height"] * 4
            return (img,), None
        if class_type == "LoadImage":
            return (FakeImage(width=8, height=8, batch=1, color=0x808080), None), None
        if class_type == "GetImageSize":
            img = _image(inputs.get("image"))
            server.send_progress_text(f"width: {img['width']}, height: {img['height']}\n batch size: {img['batch']}", nid)
            return (img["width"], img["height"], img["batch"]), None
        if class_type in ("SaveImage", "PreviewImage"):
            return (), self._save_images(prompt, class_type, inputs, extra_data)
        if class_type == "StandinSleep":
            seconds = float(inputs.get("seconds") or 0)
            text = inputs.get("text") or ""
            if text:
                server.send_progress_text(str(text), nid)
            steps = max(1, int(seconds / 0.1))
            end = time.monotonic() + seconds
            step = 0
            while True:
                if nodes.processing_interrupted():
                    raise InterruptProcessingException()
                now = time.monotonic()
                if now >= end:
                    break
                await asyncio.sleep(min(0.02, end - now))
                new_step = min(steps, int((1 - (end - time.monotonic()) / seconds) * steps)) if seconds > 0 else steps
                if new_step != step:
                    step = new_step
                    server.send_sync("progress", {"value": step, "max": steps, "prompt_id": prompt_id, "node": nid},
                                     server.client_id)
            if inputs.get("fail"):
                raise RuntimeError("StandinSleep failed on purpose")
            return (), None
        # anything else: no work, empty outputs of the declared arity
        return tuple(None for _ in range(n_out)), None

    def _save_images(self, prompt, class_type, inputs, extra_data):
        img = _image(inputs.get("images"))
        if class_type == "SaveImage":
            output_dir = folder_paths.get_output_directory()
            filename_prefix = str(inputs.get("filename_prefix", "ComfyUI"))
            kind = "output"
        else:
            output_dir = folder_paths.get_temp_directory()
            filename_prefix = "ComfyUI" + "_temp_" + ''.join(random.choice("abcdefghijklmnopqrstupvxyz") for _ in range(5))
            kind = "temp"
        full_output_folder, filename, counter, subfolder, filename_prefix = folder_paths.get_save_image_path(
            filename_prefix, output_dir, img["width"], img["height"])
        color = int(img.get("color") or 0)
        rgb = ((color >> 16) & 0xFF, (color >> 8) & 0xFF, color & 0xFF)
        text = {"prompt": json.dumps(prompt)}
        pnginfo = extra_data.get("extra_pnginfo") if isinstance(extra_data, dict) else None
        if isinstance(pnginfo, dict):
            for k, v in pnginfo.items():
                text[str(k)] = json.dumps(v)
        data = make_png(max(1, min(MAX_PNG_SIDE, img["width"])), max(1, min(MAX_PNG_SIDE, img["height"])), rgb, text)
        results = []
        for batch_number in range(max(1, min(MAX_BATCH, int(img.get("batch") or 1)))):
            filename_with_batch_num = filename.replace("%batch_num%", str(batch_number))
            file = f"{filename_with_batch_num}_{counter:05}_.png"
            with open(os.path.join(full_output_folder, file), "wb") as f:
                f.write(data)
            results.append({"filename": file, "subfolder": subfolder, "type": kind})
            counter += 1
        return {"images": results}


def prompt_worker(q: PromptQueue, server) -> None:
    """Runs in its own thread, as ComfyUI's does (`threading.Thread(target=prompt_worker)`, so the
    thread is named "Thread-N (prompt_worker)"): one prompt at a time, each in a fresh event loop
    of this thread. So every executor `send_sync` comes from this thread, not the server's loop."""
    e = PromptExecutor(server)
    while not q.closed:
        got = q.get(timeout=1000.0)
        if got is None:
            continue
        item, item_id = got
        time.sleep(EXEC_DELAY_SECONDS)
        prompt_id = item[1]
        server.last_prompt_id = prompt_id
        extra_data = item[3]
        try:
            asyncio.run(e.execute(item[2], prompt_id, extra_data, item[4]))
        except Exception:
            logging.exception("stand-in executor failed")
            e.success = False
        q.task_done(item_id, e.history_result,
                    status=PromptQueue.ExecutionStatus(
                        status_str='success' if e.success else 'error',
                        completed=e.success,
                        messages=e.status_messages),
                    process_item=remove_sensitive)
        if server.client_id is not None:
            server.send_sync("executing", {"node": None, "prompt_id": prompt_id}, server.client_id)


def start_prompt_worker(q: PromptQueue, server) -> threading.Thread:
    thread = threading.Thread(target=prompt_worker, args=(q, server), daemon=True)
    thread.start()
    return thread


def stop_prompt_worker(q: PromptQueue, thread: threading.Thread, timeout: float = 5.0) -> None:
    """Stand-in only (ComfyUI just exits): interrupt what runs, end the worker thread."""
    q.close()
    nodes.interrupt_processing(True)
    thread.join(timeout)
