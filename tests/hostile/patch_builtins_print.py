# expect: banned
import builtins
builtins.print = lambda *a, **k: None
