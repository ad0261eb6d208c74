# expect: banned
import os
with open(os.path.expanduser('~/evolora-pwned'), 'w') as f:
    f.write('pwned')
