"""The process that runs a learner's code for one exercise: ``python -I -S -B sandbox_child.py
LIBS RFD WFD`` (started by :class:`fraglab.grading.sandbox.Child`; a script, not part of the
course's package, which it cannot import).

It holds no expected value and writes no verdict. It reads messages from fd ``RFD`` and writes
them to ``WFD`` in the format of :mod:`.wire`:

1. ``setup`` (from the grader): the exercise's name, the child's folder, and the names the
   learner's cells may use: plain data, standard modules (imported here, lazily), the course's
   services for this exercise (*facades*: each function a request to the grader, each constant
   a value, each exception a class of the same name) and, for every other name of the
   notebook that belongs to the course, a stand-in that refuses every use and says why;
2. the walls go up (:func:`.jail.lock`), then ``ready`` with the walls' names;
3. ``exec`` (run a cell's text, report the names it defines: a function, plain data, or why
   not), ``call`` (call a function the cell defined with plain-data arguments, return its
   plain-data result), each answered by ``done`` or ``error`` (type, message, the line of the
   learner's cell where it was raised). While one runs, the learner's code may send
   ``request`` (call a service, call or read an attribute of an object the grader handed out)
   and gets ``reply`` or ``raise``.

Prints and warnings of the learner's code are dropped.
"""
import importlib.util
import io
import json
import os
import sys
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_fraglab_grading_{name}",
                                                  os.path.join(HERE, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Channel:
    def __init__(self, rfd: int, wfd: int, wire):
        self.r, self.w, self.wire = os.fdopen(rfd, "rb", buffering=1 << 16), wfd, wire

    def recv(self) -> dict:
        line = self.r.readline(self.wire.MAX_LINE + 1)
        if not line:
            os._exit(0)                                    # the grader is gone
        return self.wire.loads(line)

    def send(self, msg: dict) -> None:
        data = self.wire.dumps(msg)
        while data:
            data = data[os.write(self.w, data):]


class _RefusingDict(dict):
    """The ``__dict__`` of a stand-in: every key is missing, and says why; nothing can be set."""

    def __missing__(self, key):
        raise KeyError(self.why(key))

    def why(self, key):
        return self.get("__why__", lambda k: f"grading refused {k}")(key)

    def __setitem__(self, key, value):
        raise PermissionError(self.why(key))

    def update(self, *a, **k):
        raise PermissionError(self.why(next(iter(k), "update")))


class Refused:
    """A name of the notebook that the learner's code may not use here."""

    def __init__(self, name: str, why: str):
        d = _RefusingDict()
        dict.__setitem__(d, "__why__", lambda k: f"grading refused `{name}.{k}`: {why}")
        object.__setattr__(self, "__dict__", d)
        object.__setattr__(self, "_Refused__say", f"grading refused `{name}`: {why}")

    def __getattr__(self, key):
        raise PermissionError(self.__dict__.why(key))

    def __setattr__(self, key, value):
        raise PermissionError(self.__dict__.why(key))

    def __call__(self, *a, **k):
        raise PermissionError(self.__say)

    def __getitem__(self, key):
        raise PermissionError(self.__say)

    __setitem__ = __delitem__ = __getitem__

    def __iter__(self):
        raise PermissionError(self.__say)

    def __len__(self):
        raise PermissionError(self.__say)

    def __bool__(self):
        return True

    def __repr__(self):
        return f"<{self.__say}>"


class Facade:
    """A course module as the learner's code sees it here: only what the exercise may use."""

    def __init__(self, alias: str, members: dict, exercise: str, offered: str):
        d = _RefusingDict()
        why = (f"while {exercise} is graded your code may use only {offered} of `{alias}`")
        dict.__setitem__(d, "__why__", lambda k: f"grading refused `{alias}.{k}`: {why}")
        object.__setattr__(self, "__dict__", d)
        for name, value in members.items():
            dict.__setitem__(d, name, value)
        dict.__setitem__(d, "__name__", alias)

    def __getattr__(self, key):
        raise AttributeError(self.__dict__.why(key))

    def __repr__(self):
        return f"<the course's {self.__dict__['__name__']}, as graded>"


class CourseObject:
    """An object that stays in the grader (a build, a plan, a timing...): attributes and calls
    are requests."""
    __slots__ = ("_n", "_type")

    def __init__(self, n: int, type_name: str):
        object.__setattr__(self, "_n", n)
        object.__setattr__(self, "_type", type_name)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return SESSION.request("getattr", ref=self._n, name=name)

    def __call__(self, *args, **kwargs):
        return SESSION.request("call_ref", ref=self._n, args=list(args), kwargs=kwargs)

    def __repr__(self):
        return f"<{self._type} of the course>"


class LazyModule(types.ModuleType):
    """A standard module the notebook imported, imported here at its first use (through the
    import gate)."""

    def __init__(self, alias: str, module: str):
        super().__init__(alias)
        self.__dict__["_LazyModule__module"] = module

    def __getattr__(self, name):
        mod = importlib.import_module(self.__module)
        return getattr(mod, name)


def _figure(content):
    """A matplotlib figure rebuilt from the content the grader sent (lines, labels, legend,
    titles, texts, limits)."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=tuple(content["size"]))
    for a in content["axes"]:
        ax = fig.add_axes(a["position"])
        for ln in a["lines"]:
            ax.plot(ln["x"], ln["y"], label=ln["label"], color=ln["color"],
                    linestyle=ln["linestyle"], linewidth=ln["linewidth"])
        for t in a["texts"]:
            ax.text(t["x"], t["y"], t["text"])
        ax.set_title(a["title"], loc="left")
        ax.set_xlabel(a["xlabel"])
        ax.set_ylabel(a["ylabel"])
        ax.set_xlim(*a["xlim"])
        ax.set_ylim(*a["ylim"])
        if a["legend"] is not None:
            ax.legend(ax.get_lines()[:len(a["legend"])], a["legend"])
    return fig


BUILTIN_ERRORS = {c.__name__: c for c in (
    ValueError, TypeError, KeyError, IndexError, ZeroDivisionError, ArithmeticError,
    OverflowError, FloatingPointError, NotImplementedError, RuntimeError, AttributeError,
    NameError, AssertionError, LookupError, PermissionError, ImportError, ModuleNotFoundError,
    OSError, FileNotFoundError, RecursionError, Exception)}


class Session:
    def __init__(self, channel, wire):
        self.ch, self.wire = channel, wire
        self.ns: dict = {"__name__": "__exercise__", "__builtins__": __builtins__}
        # the learner's functions are called from a frame whose globals are their own
        exec("def __grading_call__(fn, args, kwargs):\n    return fn(*args, **kwargs)\n", self.ns)
        self.errors: dict = {}
        self.exercise = "this exercise"
        self.ids = 0

    # ---- values ------------------------------------------------------------------------------
    def decode(self, value):
        return self.wire.decode(value, ref=CourseObject, figure=_figure)

    def encode(self, value):
        return self.wire.encode(value, ref=lambda o: [o._n, o._type]
                                if isinstance(o, CourseObject) else None)

    # ---- setup ---------------------------------------------------------------------------------
    def setup(self, msg) -> None:
        self.exercise = msg["exercise"]
        for name, spec in msg["names"].items():
            kind = spec["kind"]
            if kind == "data":
                self.ns[name] = self.decode(spec["value"])
            elif kind == "module":
                mod = spec["module"]
                self.ns[name] = (sys.modules[mod] if mod in sys.modules or mod == "numpy" and
                                 importlib.import_module(mod) else LazyModule(name, mod))
            elif kind == "facade":
                self.ns[name] = self.facade(name, spec["members"])
            else:
                self.ns[name] = Refused(name, spec["why"])
        for mod in ("IPython", "ipykernel", "jupyter_client", "zmq", "nbval", "pytest", "_pytest",
                    "cupy", *msg.get("course_modules", ())):
            sys.modules[mod] = Refused(mod, f"{mod} is not in the process that runs your code")

    def facade(self, alias: str, members: dict) -> Facade:
        out = {}
        for name, m in members.items():
            if m["kind"] == "value":
                out[name] = self.decode(m["value"])
            elif m["kind"] == "exception":
                out[name] = self.errors[name] = type(name, (Exception,), {"__module__": alias})
            else:
                out[name] = self.service(f"{alias}.{name}", name)
        return Facade(alias, out, self.exercise, ", ".join(sorted(members)))

    def service(self, target: str, name: str):
        def service(*args, **kwargs):
            return self.request("call", service=target, args=list(args), kwargs=kwargs)
        service.__name__ = service.__qualname__ = name
        return service

    # ---- requests to the grader ----------------------------------------------------------------
    def request(self, kind: str, **fields):
        self.ids += 1
        rid = f"c{self.ids}"
        for key in ("args", "kwargs"):
            if key in fields:
                fields[key] = self.encode(fields[key])
        self.ch.send({"op": "request", "id": rid, "kind": kind, **fields})
        while True:
            msg = self.ch.recv()
            if msg.get("id") == rid and msg["op"] == "reply":
                return self.decode(msg["value"])
            if msg.get("id") == rid and msg["op"] == "raise":
                cls = self.errors.get(msg["type"]) or BUILTIN_ERRORS.get(msg["type"], RuntimeError)
                raise cls(msg["message"] if cls in self.errors.values() or msg["type"] in
                          BUILTIN_ERRORS else f"{msg['type']}: {msg['message']}")
            self.handle(msg)                               # the grader calls back in

    # ---- what the grader asks ------------------------------------------------------------------
    def handle(self, msg) -> None:
        op, mid = msg["op"], msg.get("id")
        try:
            if op == "exec":
                exec(compile(msg["code"], msg["filename"], "exec"), self.ns)
                out = {name: self.describe(name) for name in msg["names"]}
                self.ch.send({"op": "done", "id": mid, "names": out})
            elif op == "call":
                fn = self.ns.get(msg["name"])
                if not callable(fn):
                    raise NameError(f"{msg['name']} is not a function of your cell")
                value = self.ns["__grading_call__"](fn, self.decode(msg["args"]),
                                                     self.decode(msg["kwargs"]))
                try:
                    out = self.encode(value)
                except self.wire.WireError as e:
                    raise TypeError(f"grading refused the value {msg['name']} returned: {e}") \
                        from None
                self.ch.send({"op": "done", "id": mid, "value": out})
            else:
                raise RuntimeError(f"unknown request {op!r}")
        except BaseException as e:                          # the learner's error, sent back
            self.ch.send({"op": "error", "id": mid, "type": type(e).__name__,
                          "message": (str(e.args[0]) if isinstance(e, KeyError) and e.args
                                      else str(e))[:4000], "where": _where(e)})

    def describe(self, name: str) -> dict:
        if name not in self.ns:
            return {"kind": "missing"}
        value = self.ns[name]
        if callable(value) and not isinstance(value, CourseObject):
            return {"kind": "function"}
        try:
            return {"kind": "data", "value": self.encode(value)}
        except self.wire.WireError as e:
            return {"kind": "refused", "why": str(e)}


def _where(e: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if f.filename.startswith("<exercise")]
    if not frames:
        return ""
    f = frames[-1]
    return f"line {f.lineno} of {f.filename.strip('<>')}" + (
        f", in {f.name}" if f.name != "<module>" else "")


class _Sink(io.TextIOBase):
    """Where the learner's prints go: nowhere (the last 4000 characters are kept)."""

    def __init__(self):
        self.tail = ""

    def writable(self):
        return True

    def write(self, s):
        self.tail = (self.tail + s)[-4000:]
        return len(s)


SESSION = None


def main(argv) -> None:
    global SESSION
    libs, rfd, wfd = json.loads(argv[1]), int(argv[2]), int(argv[3])
    sys.path[:0] = [p for p in libs if p not in sys.path]
    wire, jail = _load("wire"), _load("jail")
    jail.die_with_parent()
    ch = Channel(rfd, wfd, wire)
    SESSION = s = Session(ch, wire)
    setup = ch.recv()
    if setup.get("op") != "setup":
        os._exit(3)
    if setup.get("figures"):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.figure  # noqa: F401  (before the walls: its fonts and data)
    s.setup(setup)
    import warnings
    warnings.simplefilter("ignore")
    layers = jail.lock([p for p in sys.path if p] + setup.get("read_roots", []), setup["workdir"])
    sys.stdout = sys.stderr = _Sink()
    ch.send({"op": "ready", "layers": layers})
    while True:
        s.handle(ch.recv())


if __name__ == "__main__":
    main(sys.argv)
