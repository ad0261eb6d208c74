# expect: banned
from __future__ import annotations
print(1)
