# expect: banned
import os
print(dict(os.environ))
