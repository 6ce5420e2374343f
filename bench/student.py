"""One simulated student: a browser tab as a websocket speaking Streamlit's own protocol, and what a class of them
saw. ``bench/classroom_load.py``'s class and ``bench/live_class.py``'s room are made of them; no browser runs, so
what is measured is the server."""

import asyncio
import hashlib
import random
import statistics
import time
from collections import defaultdict

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.asyncio.client import connect

__all__ = ["REPLY_TIMEOUT_S", "CONTENT", "Stats", "Student", "quantiles"]

REPLY_TIMEOUT_S = 120.0
CONTENT = {"markdown", "plotly_chart", "metric", "table", "dataframe", "heading", "alert", "code", "text", "json",
           "progress", "exception"}


class Stats:
    """What the whole class saw."""

    def __init__(self):
        self.moves = defaultdict(list)      # page -> reply seconds
        self.changed = defaultdict(int)     # page -> moves that changed the output
        self.opens = []                     # seconds to open a page
        self.noop = [0, 0]                  # no-op reruns: [changed the output, total]
        self.trainings, self.queue_waits = [], []
        self.exceptions, self.errors, self.disconnects, self.timeouts = [], defaultdict(int), 0, 0
        self.drill = []


class Student:
    """One browser tab: a websocket, the page it is on, the sliders it was shown and what its screen shows."""

    def __init__(self, url: str, stats: Stats, rng: random.Random):
        self.url, self.stats, self.rng = url, stats, rng
        self.page, self.query, self.sliders, self.choices, self.values = "", "", {}, {}, {}
        self.buttons, self.screen, self.texts = {}, {}, []
        self.toggles = {}  # label -> (widget id, value): sent with every rerun, as a browser sends every widget's

    async def connect(self) -> None:
        self.ws = await connect(self.url, max_size=None, open_timeout=60, ping_interval=None)

    def digest(self) -> str:
        return hashlib.sha256(b"".join(v for _, v in sorted(self.screen.items()))).hexdigest()

    async def rerun(self, widgets: list | None = None, fragment: str = "", press: str | None = None) -> float:
        """Send one rerun request; read deltas until "script finished"; seconds it took."""
        message = BackMsg()
        message.rerun_script.page_name = self.page
        message.rerun_script.query_string = self.query  # the address bar, as the server last set it
        if fragment:
            message.rerun_script.fragment_id = fragment
        for state in widgets or []:
            message.rerun_script.widget_states.widgets.append(state)
        for widget, value in self.toggles.values():  # a toggle left out would go back to its default (presenting)
            toggle = message.rerun_script.widget_states.widgets.add()
            toggle.id, toggle.bool_value = widget, value
        if press is not None:
            widget = message.rerun_script.widget_states.widgets.add()
            widget.id, widget.trigger_value = self.buttons[press], True
        start = time.perf_counter()
        await self.ws.send(message.SerializeToString())
        return await self.read_until_finished(start, full=not fragment)

    async def read_until_finished(self, start: float, full: bool) -> float:
        if full:  # a full run redraws the page: what it does not draw again is gone
            self.screen.clear()
            self.sliders, self.choices, self.toggles = {}, {}, {}
        while True:
            reply = ForwardMsg()
            reply.ParseFromString(await asyncio.wait_for(self.ws.recv(), REPLY_TIMEOUT_S))
            kind = reply.WhichOneof("type")
            if kind == "delta" and reply.delta.WhichOneof("type") == "new_element":
                self.shown(reply.delta.new_element, tuple(reply.metadata.delta_path), reply.delta.fragment_id)
            elif kind == "page_info_changed":  # widgets bound to the URL wrote their values there
                self.query = reply.page_info_changed.query_string
            elif kind == "script_finished" and reply.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                return time.perf_counter() - start

    def shown(self, element, path: tuple, fragment: str) -> None:
        kind = element.WhichOneof("type")
        if kind == "slider":
            self.sliders[element.slider.label] = (element.slider, fragment)
        elif kind in ("radio", "selectbox") and path[:1] == (0,):  # the page's own, not the sidebar's model picker
            self.choices[getattr(element, kind).label] = (getattr(element, kind), fragment)
        elif kind == "button":
            self.buttons[element.button.label] = element.button.id
        elif kind == "checkbox":
            box = element.checkbox
            self.toggles[box.label] = (box.id, box.value if box.set_value else box.default)
        elif kind in CONTENT:
            self.screen[path] = element.SerializeToString()
            if kind == "exception":
                self.stats.exceptions.append(f"{self.page}: {element.exception.type}: {element.exception.message}")
            elif kind == "alert":
                self.texts.append(element.alert.body)
                if element.alert.format == element.alert.ERROR:
                    self.stats.errors[f"{self.page}: {element.alert.body[:90]}"] += 1

    async def open(self, page: str) -> float:
        self.page, self.query, self.sliders, self.choices = page, "", {}, {}  # a link to the page, no parameters
        return await self.rerun()

    def drag(self, label: str) -> tuple:
        """(widget state of the slider ``label`` dragged by up to a tenth of its range, its fragment)."""
        proto, fragment = self.sliders[label]
        current = self.current(label, proto)
        state = BackMsg().rerun_script.widget_states.widgets.add()
        state.id = proto.id
        if proto.options:  # a select slider: its value is the option's text
            index, n = int(current), len(proto.options)
            step = self.rng.choice([-1, 1]) * self.rng.randint(1, max(1, n // 10))
            new = index + step if 0 <= index + step < n else index - step
            state.string_array_value.data.append(proto.options[min(max(new, 0), n - 1)])
        else:
            low, high, unit = proto.min, proto.max, proto.step or 1
            steps = max(1, int((high - low) / unit / 10))
            value = current + self.rng.choice([-1, 1]) * self.rng.randint(1, steps) * unit
            if not low <= value <= high:
                value = 2 * current - value
            value = min(max(value, low), high)
            state.double_array_value.data.append(value)
        chosen = list(proto.options).index(state.string_array_value.data[0]) if proto.options else value
        self.values[self.page, label] = chosen
        return state, fragment

    def current(self, label: str, proto) -> float:
        """The slider's value on this student's screen: set by the server, else the last drag on this page (the
        widgets keep their values when the student comes back to a page), else the default."""
        if proto.set_value and proto.value:
            return proto.value[0]
        last = self.values.get((self.page, label))
        if last is not None and (len(proto.options) > last if proto.options else proto.min <= last <= proto.max):
            return last
        return proto.default[0]

    def choose(self, label: str) -> tuple:
        """(widget state of the radio or select box ``label`` set to another of its options, its fragment)."""
        proto, fragment = self.choices[label]
        if proto.set_value and proto.HasField("raw_value"):
            current = proto.raw_value
        elif self.values.get((self.page, label)) in proto.options:
            current = self.values[self.page, label]
        else:
            current = proto.options[proto.default] if proto.HasField("default") else None
        state = BackMsg().rerun_script.widget_states.widgets.add()
        state.id, state.string_value = proto.id, self.rng.choice([o for o in proto.options if o != current])
        self.values[self.page, label] = state.string_value
        return state, fragment

    def movable(self) -> list[tuple]:
        sliders = [(self.drag, label) for label, (proto, _) in self.sliders.items()
                   if (len(proto.options) > 1) or (not proto.options and proto.max > proto.min)]
        return sliders + [(self.choose, label) for label, (proto, _) in self.choices.items() if len(proto.options) > 1]

    async def move(self) -> None:
        """Drag a slider or pick another option of a radio or select box, one of the page's at random."""
        widgets = self.movable()
        if not widgets:
            return
        change, label = self.rng.choice(widgets)
        state, fragment = change(label)
        before = self.digest()
        self.stats.moves[self.page].append(await self.rerun([state], fragment))
        self.stats.changed[self.page] += self.digest() != before

    async def noop(self) -> None:
        before = self.digest()
        await self.rerun()
        self.stats.noop[0] += self.digest() != before
        self.stats.noop[1] += 1


def quantiles(xs: list[float]) -> str:
    if not xs:
        return "none"
    xs = sorted(xs)
    return (f"p50 {statistics.median(xs) * 1e3:6,.0f} ms · p95 {xs[int(0.95 * (len(xs) - 1))] * 1e3:6,.0f} ms · "
            f"max {xs[-1] * 1e3:6,.0f} ms")
