# expect: banned
globals()['__builtins__']['open']('/tmp/evolora-pwned', 'w')
