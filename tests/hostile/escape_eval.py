# expect: banned
# runtime: banned
g = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0].__init__.__globals__
B = g['__builtins__']
B['eval']("open('/tmp/evolora-pwned', 'w')")
