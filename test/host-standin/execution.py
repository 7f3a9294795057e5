"""Prompt queue, validation and the executor thread of the stand-in.

Guarantees (the observed behaviour of ComfyUI 0.3.64, see README "Execution"):
* One thread, named `Thread-N (prompt_worker)`, takes prompts off the queue by number and
  runs each in a fresh event loop, so every executor `send_sync` call comes from that thread.
* Execution messages go to the prompt's `client_id` only; without one, only
  `progress_state`, `progress` and `execution_interrupted` are sent (to every socket).
  `executing` with `node: null` follows the history entry.
* A node whose inputs (followed through its links) equal those of a node of the previous
  prompt is served from that prompt's results: `execution_cached`, nothing re-run.
* History entries never hold `auth_token_comfy_org` / `api_key_comfy_org`.
"""
from __future__ import annotations

import asyncio
import heapq
import inspect
import json
import logging
import os
import threading
import time
import traceback
import uuid
from typing import Any

import nodes

log = logging.getLogger("standin.execution")

HISTORY_LIMIT = int(os.environ.get("STANDIN_HISTORY_LIMIT", "10000"))  # ComfyUI keeps 10,000; tests shrink it
SECRET_KEYS = ("auth_token_comfy_org", "api_key_comfy_org")
START_DELAY = float(os.environ.get("STANDIN_EXEC_DELAY", "0.01"))


def _ms() -> int:
    return int(time.time() * 1000)


# =========================================================================== queue and history
class PromptQueue:
    """Pending items ordered by number (ties: arrival), the running ones, and the history."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._pending: list[tuple[float, int, list]] = []  # heap of (number, arrival, item)
        self._arrivals = 0
        self._running: dict[int, list] = {}
        self._next_task = 0
        self._closed = False
        self.history: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------------ queue
    def put(self, item: list) -> None:
        with self._lock:
            self._arrivals += 1
            heapq.heappush(self._pending, (item[0], self._arrivals, item))
            self._wake.notify()
        self.server.queue_updated()

    def get(self, timeout: float | None = None) -> tuple[list, int] | None:
        """The next item and its task id, or None on timeout or once closed."""
        with self._lock:
            while not self._pending and not self._closed:
                if not self._wake.wait(timeout):
                    return None
            if self._closed:
                return None
            item = heapq.heappop(self._pending)[2]
            self._next_task += 1
            task = self._next_task
            self._running[task] = item
        self.server.queue_updated()
        return item, task

    def task_done(self, task: int, outputs: dict, status: dict, meta: dict) -> None:
        with self._lock:
            item = self._running.pop(task)
            if len(self.history) >= HISTORY_LIMIT:
                del self.history[next(iter(self.history))]  # the oldest entry
            kept = {k: v for k, v in item[3].items() if k not in SECRET_KEYS}
            self.history[item[1]] = {"prompt": [item[0], item[1], item[2], kept, item[4]],
                                     "outputs": outputs, "status": status, "meta": meta}
        self.server.queue_updated()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify_all()

    def get_current_queue(self) -> tuple[list, list]:
        with self._lock:
            return [list(i) for i in self._running.values()], [list(e[2]) for e in self._pending]

    def running_prompt_ids(self) -> list[str]:
        with self._lock:
            return [i[1] for i in self._running.values()]

    def get_tasks_remaining(self) -> int:
        with self._lock:
            return len(self._pending) + len(self._running)

    def wipe_queue(self) -> None:
        with self._lock:
            self._pending.clear()
        self.server.queue_updated()

    def delete_queue_item(self, prompt_id: str) -> bool:
        """Removes a pending item; running or unknown ids are left alone."""
        with self._lock:
            left = [e for e in self._pending if e[2][1] != prompt_id]
            if len(left) == len(self._pending):
                return False
            heapq.heapify(left)
            self._pending = left
        self.server.queue_updated()
        return True

    # ------------------------------------------------------------------ history
    def get_history(self, prompt_id: str | None = None, max_items: int | None = None, offset: int = -1) -> dict:
        with self._lock:
            if prompt_id is not None:
                return {prompt_id: self.history[prompt_id]} if prompt_id in self.history else {}
            ids = list(self.history)
            if offset < 0:
                # a negative offset means "the newest max_items", or everything without a limit
                offset = max(0, len(ids) - max_items) if max_items is not None else 0
            chosen = ids[offset:] if max_items is None else ids[offset:offset + max_items]
            return {i: self.history[i] for i in chosen}

    def wipe_history(self) -> None:
        with self._lock:
            self.history.clear()

    def delete_history_item(self, prompt_id: str) -> None:
        with self._lock:
            self.history.pop(prompt_id, None)


# =========================================================================== validation
def _type_name(exc: BaseException) -> str:
    module = type(exc).__module__
    return type(exc).__qualname__ if module == "builtins" else f"{module}.{type(exc).__qualname__}"


def _problem(kind: str, message: str, details: str = "", **extra: Any) -> dict[str, Any]:
    return {"type": kind, "message": message, "details": details, "extra_info": extra}


def _is_link(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2


def _spec_parts(spec: Any) -> tuple[Any, dict]:
    spec = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    return (spec[0] if spec else None), (spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {})


def _check_constant(name: str, spec: Any, value: Any) -> tuple[Any, dict | None]:
    """The value converted to the input's type, or the problem with it."""
    kind, options = _spec_parts(spec)
    about = {"input_name": name, "input_config": [kind, options], "received_value": value}
    if isinstance(kind, list):
        # only the classic list form is checked; the host lets a ["COMBO", {...}] value through
        if value not in kind:
            return value, _problem("value_not_in_list", "Value not in list", f"{name}: '{value}' not in {kind}", **about)
        return value, None
    casts = {"INT": int, "FLOAT": float, "STRING": str, "BOOLEAN": bool}
    if kind not in casts:
        return value, None  # a type only a link can carry: nothing to check on a constant
    try:
        value = casts[kind](value)
    except (TypeError, ValueError) as exc:
        return value, _problem("invalid_input_type", f"Failed to convert an input value to a {kind} value",
                               f"{name}, {value}, {exc}", **about, exception_message=str(exc))
    low, high = options.get("min"), options.get("max")
    if kind in ("INT", "FLOAT") and low is not None and value < low:
        return value, _problem("value_smaller_than_min", f"Value {value} smaller than min of {low}", name, **about)
    if kind in ("INT", "FLOAT") and high is not None and value > high:
        return value, _problem("value_bigger_than_max", f"Value {value} bigger than max of {high}", name, **about)
    return value, None


class _Checker:
    """Checks the nodes an output needs; converted values are written back into the prompt."""

    def __init__(self, prompt: dict) -> None:
        self.prompt = prompt
        self.good: dict[str, bool] = {}
        self.problems: dict[str, list[dict]] = {}

    def check(self, node_id: str) -> bool:
        if node_id in self.good:
            return self.good[node_id]
        self.good[node_id] = True  # provisional: a cycle does not recurse forever
        problems: list[dict] = []
        upstream_ok = True
        try:
            upstream_ok = self.check_inputs(self.prompt[node_id], problems)
        except Exception as exc:  # e.g. a link to a node that is not in the prompt (KeyError)
            problems.append(_problem("exception_during_validation", "Exception when validating node", str(exc),
                                     exception_type=_type_name(exc), traceback=traceback.format_tb(exc.__traceback__)))
        if problems:
            self.problems[node_id] = problems
        self.good[node_id] = upstream_ok and not problems
        return self.good[node_id]

    def check_inputs(self, node: dict, problems: list[dict]) -> bool:
        inputs = node.setdefault("inputs", {})
        declared = nodes.node_info(node["class_type"]).get("input", {})
        # a class's own VALIDATE_INPUTS replaces the usual check of the inputs it names
        own_check = getattr(nodes.NODE_CLASS_MAPPINGS[node["class_type"]], "VALIDATE_INPUTS", None)
        own_names = list(inspect.signature(own_check).parameters) if own_check is not None else []
        upstream_ok = True
        for section in ("required", "optional"):
            for name, spec in (declared.get(section) or {}).items():
                if name not in inputs:
                    if section == "required":
                        problems.append(_problem("required_input_missing", "Required input is missing", name,
                                                 input_name=name))
                    continue
                value = inputs[name]
                if isinstance(value, dict) and "__value__" in value:
                    value = inputs[name] = value["__value__"]  # how clients send a literal list
                elif isinstance(value, list) and not _is_link(value):
                    problems.append(_problem("bad_linked_input", "Bad linked input, must be a length-2 list of "
                                             "[node_id, slot_index]", name, input_name=name,
                                             input_config=list(_spec_parts(spec)), received_value=value))
                    continue
                elif _is_link(value):
                    source = str(value[0])
                    if source not in self.prompt:
                        raise KeyError(source)
                    upstream_ok = self.check(source) and upstream_ok
                    continue
                if name in own_names:
                    continue
                value, problem = _check_constant(name, spec, value)
                if problem is None:
                    inputs[name] = value
                else:
                    problems.append(problem)
        mine = {n: inputs[n] for n in own_names if n in inputs and not _is_link(inputs[n])}
        if own_check is not None and mine and not problems:
            verdict = own_check(**mine)
            if verdict is not True:
                shown = ", ".join(mine)
                problems.append(_problem("custom_validation_failed", "Custom validation failed for node",
                                         f"{shown} - {verdict}", input_name=shown))
        return upstream_ok

    def needed_by(self, output: str) -> list[str]:
        seen: list[str] = []
        stack = [output]
        while stack:
            node_id = stack.pop()
            if node_id in seen or node_id not in self.prompt:
                continue
            seen.append(node_id)
            stack += [str(v[0]) for v in self.prompt[node_id].get("inputs", {}).values() if _is_link(v)]
        return seen


def validate_prompt(prompt_id: str, prompt: Any, targets: list | None = None) -> tuple[bool, dict | None, list[str], dict]:
    """(ok, error, outputs to run, node errors), as POST /prompt reports them."""
    outputs = []
    for node_id, node in prompt.items():
        if not isinstance(node, dict) or "class_type" not in node:
            return False, _problem("invalid_prompt", "Cannot execute because a node is missing the class_type property.",
                                   f"Node ID '#{node_id}'"), [], {}
        cls = nodes.NODE_CLASS_MAPPINGS.get(node["class_type"])
        if cls is None:
            return False, _problem("invalid_prompt", f"Cannot execute because node {node['class_type']} does not exist.",
                                   f"Node ID '#{node_id}'"), [], {}
        if getattr(cls, "OUTPUT_NODE", False) and (targets is None or node_id in targets):
            outputs.append(node_id)
    if not outputs:
        return False, _problem("prompt_no_outputs", "Prompt has no outputs"), [], {}

    checker = _Checker(prompt)
    good = [o for o in outputs if checker.check(o)]
    node_errors: dict[str, dict] = {}
    for output in outputs:
        if output in good:
            continue
        for node_id in checker.needed_by(output):
            if node_id in checker.problems:
                entry = node_errors.setdefault(node_id, {"errors": checker.problems[node_id], "dependent_outputs": [],
                                                         "class_type": prompt[node_id]["class_type"]})
                entry["dependent_outputs"].append(output)
    if good:
        return True, None, good, node_errors
    # the summary names only the failing outputs' own problems, not those of nodes upstream
    lines = [f"{p['message']}: {p['details']}" for o in outputs if o not in good for p in checker.problems.get(o, [])]
    return False, _problem("prompt_outputs_failed_validation", "Prompt outputs failed validation", "\n".join(lines)), [], node_errors


# =========================================================================== execution
_current: "_Run | None" = None  # the run in progress (one worker thread)


def report_progress(value: float, total: float) -> None:
    """For long-running nodes: a `progress` message for the node that runs now."""
    run = _current
    if run is not None and run.node is not None:
        run.server.send_sync("progress", {"value": value, "max": total, "prompt_id": run.prompt_id, "node": run.node},
                             run.client_id)


class _Run:
    """One prompt's execution: the messages it sends and what goes into its history entry."""

    def __init__(self, server: Any, item: list, cache: dict[str, tuple]) -> None:
        self.server = server
        self.number, self.prompt_id, self.prompt, self.extra, self.targets = item[:5]
        self.client_id = self.extra.get("client_id")
        self.cache = cache
        self.messages: list[list] = []
        self.states: dict[str, dict] = {}
        self.values: dict[str, tuple] = {}
        self.ui: dict[str, Any] = {}
        self.done: list[str] = []
        self.node: str | None = None

    # ------------------------------------------------------------------ messages
    def say(self, event: str, data: dict, to_all: bool = False) -> None:
        """A message that is also kept in the history entry."""
        data["timestamp"] = _ms()
        self.messages.append([event, data])
        if self.client_id is not None or to_all:
            self.server.send_sync(event, data, self.client_id)

    def tell(self, event: str, data: dict) -> None:
        """A message for the prompt's own client only."""
        if self.client_id is not None:
            self.server.send_sync(event, data, self.client_id)

    def progress_state(self, node_id: str, state: str, whole: float = 1.0) -> None:
        # the host reports a cached node with integer values, a run one with floats
        self.states[node_id] = {"value": whole if state == "finished" else 0.0, "max": whole, "state": state,
                                "node_id": node_id, "prompt_id": self.prompt_id, "display_node_id": node_id,
                                "parent_node_id": None, "real_node_id": node_id}
        snapshot = {k: dict(v) for k, v in self.states.items()}
        self.server.send_sync("progress_state", {"prompt_id": self.prompt_id, "nodes": snapshot}, self.client_id)

    # ------------------------------------------------------------------ graph
    def order(self) -> list[str]:
        """Every node the outputs need, each after the nodes it reads from."""
        placed: list[str] = []
        entered: set[str] = set()

        def place(node_id: str) -> None:
            if node_id in entered:  # placed already, or a cycle
                return
            entered.add(node_id)
            for value in self.prompt[node_id].get("inputs", {}).values():
                if _is_link(value):
                    place(str(value[0]))
            placed.append(node_id)

        for output in self.targets:
            place(output)
        return placed

    def signatures(self, order: list[str]) -> dict[str, str]:
        sigs: dict[str, str] = {}
        for node_id in order:  # upstream first, so every link's source is known
            node = self.prompt[node_id]
            cls = nodes.NODE_CLASS_MAPPINGS[node["class_type"]]
            parts: dict[str, Any] = {}
            for name, value in node.get("inputs", {}).items():
                parts[name] = ["link", sigs[str(value[0])], value[1]] if _is_link(value) else value
            nonce = uuid.uuid4().hex if getattr(cls, "NEVER_CACHED", False) else ""
            sigs[node_id] = json.dumps([node["class_type"], parts, nonce], sort_keys=True, default=repr)
        return sigs

    def arguments(self, node_id: str) -> dict[str, Any]:
        node = self.prompt[node_id]
        declared = nodes.node_info(node["class_type"]).get("input", {})
        given = node.get("inputs", {})
        args: dict[str, Any] = {}
        for section in ("required", "optional"):
            for name in declared.get(section) or {}:
                if name in given:
                    value = given[name]
                    args[name] = self.values[str(value[0])][value[1]] if _is_link(value) else value
        hidden = {"PROMPT": self.prompt, "EXTRA_PNGINFO": self.extra.get("extra_pnginfo"), "UNIQUE_ID": node_id,
                  "AUTH_TOKEN_COMFY_ORG": self.extra.get("auth_token_comfy_org"),
                  "API_KEY_COMFY_ORG": self.extra.get("api_key_comfy_org")}
        for name, kind in (declared.get("hidden") or {}).items():
            args[name] = hidden.get(kind)
        return args

    async def run_node(self, node_id: str) -> None:
        node = self.prompt[node_id]
        cls = nodes.NODE_CLASS_MAPPINGS[node["class_type"]]
        result = getattr(cls(), cls.FUNCTION)(**self.arguments(node_id))
        if inspect.isawaitable(result):
            result = await result
        ui = None
        if isinstance(result, dict):
            ui, result = result.get("ui"), result.get("result", ())
        self.values[node_id] = tuple(result or ())
        if ui is not None:
            self.ui[node_id] = ui

    # ------------------------------------------------------------------ the run
    async def execute(self) -> tuple[bool, dict]:
        order = self.order()
        sigs = self.signatures(order)
        cached = [n for n in self.prompt if n in sigs and sigs[n] in self.cache]
        self.say("execution_start", {"prompt_id": self.prompt_id})
        self.say("execution_cached", {"nodes": cached, "prompt_id": self.prompt_id})
        kept: dict[str, tuple] = {}
        for node_id in cached:
            # served from the cache: its results, and its UI output reported before anything runs
            kept[sigs[node_id]] = self.cache[sigs[node_id]]
            self.values[node_id], ui = self.cache[sigs[node_id]]
            if ui is not None:
                self.ui[node_id] = ui
                self.tell("executed", {"node": node_id, "display_node": node_id, "output": ui,
                                       "prompt_id": self.prompt_id})
                self.progress_state(node_id, "finished", whole=1)
        try:
            for node_id in order:
                if node_id in cached:
                    continue
                nodes.stop_if_interrupted()
                self.node = node_id
                self.server.last_node_id = node_id
                self.progress_state(node_id, "running")
                self.tell("executing", {"node": node_id, "display_node": node_id, "prompt_id": self.prompt_id})
                await self.run_node(node_id)
                kept[sigs[node_id]] = (self.values[node_id], self.ui.get(node_id))
                if node_id in self.ui:
                    self.tell("executed", {"node": node_id, "display_node": node_id, "output": self.ui[node_id],
                                           "prompt_id": self.prompt_id})
                self.done.append(node_id)
                self.progress_state(node_id, "finished")
            self.say("execution_success", {"prompt_id": self.prompt_id})
            ok = True
        except nodes.Interrupted:
            self.say("execution_interrupted", self.failure_base(), to_all=True)
            ok = False
        except Exception as exc:
            log.error("!!! Exception during processing !!! %s", exc)
            log.debug("%s", traceback.format_exc())
            data = self.failure_base()
            data.update({"exception_message": str(exc), "exception_type": _type_name(exc),
                         "traceback": traceback.format_tb(exc.__traceback__),
                         "current_inputs": self.shown_inputs(), "current_outputs": list(self.values)})
            self.say("execution_error", data)
            ok = False
        # like the host's default cache: only the last prompt's results are kept
        self.cache.clear()
        self.cache.update(kept)
        return ok, {"status_str": "success" if ok else "error", "completed": ok, "messages": self.messages}

    def failure_base(self) -> dict[str, Any]:
        node_type = self.prompt[self.node]["class_type"] if self.node in self.prompt else None
        return {"prompt_id": self.prompt_id, "node_id": self.node, "node_type": node_type, "executed": list(self.done)}

    def shown_inputs(self) -> dict[str, Any]:
        if self.node not in self.prompt:
            return {}
        return {k: [v if isinstance(v, (str, int, float, bool)) or v is None else repr(v)]
                for k, v in self.prompt[self.node].get("inputs", {}).items()}


def prompt_worker(queue: PromptQueue, server: Any) -> None:
    """The thread body; its name is what makes the thread `Thread-N (prompt_worker)`."""
    global _current
    cache: dict[str, tuple] = {}
    while True:
        got = queue.get(timeout=1.0)
        if got is None:
            if queue._closed:
                return
            continue
        item, task = got
        nodes.interrupt_processing(False)  # an interrupt sent while idle does not stop this prompt
        time.sleep(START_DELAY)
        run = _Run(server, item, cache)
        server.last_prompt_id = run.prompt_id
        server.client_id = run.client_id
        _current = run
        try:
            _ok, status = asyncio.run(run.execute())  # a fresh event loop for every prompt
        except Exception:
            log.exception("stand-in executor failed")
            status = {"status_str": "error", "completed": False, "messages": run.messages}
        finally:
            _current = None
        meta = {n: {"node_id": n, "display_node": n, "parent_node": None, "real_node_id": n} for n in run.ui}
        queue.task_done(task, dict(run.ui), status, meta)
        server.last_node_id = None
        if run.client_id is not None:
            server.send_sync("executing", {"node": None, "prompt_id": run.prompt_id}, run.client_id)


def start_prompt_worker(queue: PromptQueue, server: Any) -> threading.Thread:
    thread = threading.Thread(target=prompt_worker, args=(queue, server), daemon=True)
    thread.start()
    return thread


def stop_prompt_worker(queue: PromptQueue, thread: threading.Thread) -> None:
    queue.close()
    nodes.interrupt_processing(True)  # ends a long node quickly
    thread.join(timeout=5)
