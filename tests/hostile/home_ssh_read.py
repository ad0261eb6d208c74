# expect: banned
import os
print(open(os.path.expanduser('~/.ssh/id_rsa')).read())
