# expect: banned
# runtime: banned
from typing import get_type_hints
class A:
    x: '_' + '_import_' + '_("os").system("echo pwned > /tmp/evolora-pwned")'
get_type_hints(A)
