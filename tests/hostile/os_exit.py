# expect: banned
import os
print('42')
os._exit(0)
