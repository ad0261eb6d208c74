# expect: banned
getattr(__builtins__, 'open')('/tmp/pwned', 'w')
