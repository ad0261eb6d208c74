"""The child side of the verifier sandbox: the script a fresh interpreter runs before the
untrusted program (``python -S -s -B -P -c BOOT mem cpu files allowed banned``).

It drops the network (new user + network namespace), sets resource limits, compiles
``prog.py``, installs an import guard and an audit hook, and executes the program in its own
``__main__`` module with a reduced set of builtins. :mod:`evolora.sandbox` spawns it; the
static checks that run before are in :mod:`evolora.sandbox.policy`.

Source: Absolute Zero Reasoner (arXiv 2505.03335) executor checks; the threat model is in
README.md, "Security model".
"""

BOOT = r"""
import resource as _r, sys as _s, builtins as _b, os as _os
_mem, _cpu, _files = (int(v) for v in _s.argv[1:4])
_allowed = frozenset(_s.argv[4].split(","))
_banned = frozenset(_s.argv[5].split(","))
try:  # no network: a fresh user + network namespace has only a downed loopback
    import ctypes as _c
    _c.CDLL(None, use_errno=True).unshare(0x10000000 | 0x40000000)  # CLONE_NEWUSER|CLONE_NEWNET
    del _c
except Exception:
    pass
for _k, _v in ((_r.RLIMIT_CPU, _cpu), (_r.RLIMIT_FSIZE, 0), (_r.RLIMIT_CORE, 0),
               (_r.RLIMIT_NOFILE, _files), (_r.RLIMIT_NPROC, 0), (_r.RLIMIT_AS, _mem)):
    try:
        _r.setrlimit(_k, (_v, _v))
    except (ValueError, OSError):
        pass
with open("prog.py", encoding="utf-8") as _f:
    _code = compile(_f.read(), "prog.py", "exec", dont_inherit=True)
_m = type(_s)("__main__")  # the program's own module: typing & co. find it, not this one
_g = _m.__dict__
_real_import = _b.__import__
def _guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
    if globals is _g:
        top = name.split(".")[0]
        if level or top not in _allowed:
            raise ImportError("sandbox: import of module %r is not allowed" % top)
    return _real_import(name, globals, locals, fromlist, level)
_safe = {k: v for k, v in vars(_b).items() if k not in _banned}
_safe["__import__"] = _guarded_import
_g["__builtins__"] = _safe
_s.modules["__main__"] = _m
# Last line of defence if a program gets hold of the real builtins or a banned module:
# an audit hook (irremovable) refuses file writes, reads outside the standard library,
# processes, signals, sockets, ctypes, and compiling strings outside namedtuple/dataclasses.
_lib = _os.path.dirname(_os.__file__) + _os.sep
_wflags = _os.O_WRONLY | _os.O_RDWR | _os.O_CREAT | _os.O_TRUNC | _os.O_APPEND
_deny = ("os.", "subprocess.", "socket.", "ctypes.", "shutil.", "gc.", "resource.", "mmap.",
         "pty.", "fcntl.", "syslog.", "sqlite3.", "urllib.", "http.", "ftplib.", "smtplib.",
         "telnetlib.", "webbrowser.", "pickle.", "tempfile.", "glob.", "_thread.",
         "signal.", "sys.settrace", "sys.setprofile", "sys._current_frames", "code.__new__",
         "function.__new__", "builtins.breakpoint", "sys.remote_exec", "_posixsubprocess.")
_busy = []
_realpath, _fsdecode = _os.path.realpath, _os.fsdecode
_getframe = _s._getframe
def _audit(event, args):
    if _busy:
        return
    _busy.append(1)
    try:
        if event == "open":
            path, mode, flags = args
            writing = (any(ch in mode for ch in "wax+") if isinstance(mode, str)
                       else bool((flags or 0) & _wflags))
            if (not writing and isinstance(path, (str, bytes))
                    and _realpath(_fsdecode(path)).startswith(_lib)):
                return
            raise PermissionError("sandbox: open(%r) is not allowed" % (path,))
        if event in ("os.listdir", "os.scandir"):
            if isinstance(args[0], (str, bytes)) and (_realpath(_fsdecode(args[0])) + "/").startswith(_lib):
                return
        elif event == "compile":
            caller = _getframe(1).f_globals.get("__name__")
            if caller in ("collections", "dataclasses"):
                return
            raise PermissionError("sandbox: compiling strings is not allowed")
        if event.startswith(_deny):
            raise PermissionError("sandbox: %s is not allowed" % event)
    finally:
        _busy.pop()
_s.addaudithook(_audit)
del _r, _b, _k, _v, _f, _mem, _cpu, _files
exec(_code, _g)
"""

LAZY_IMPORTS = frozenset({"_strptime"})
"""Modules that allowed modules import on first use from C (``datetime.strptime``), with
the program's globals: the runtime import guard lets them through, the AST check does not."""
