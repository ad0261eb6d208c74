# expect: banned
with open('/tmp/evolora-pwned', 'w') as f:
    f.write('x')
