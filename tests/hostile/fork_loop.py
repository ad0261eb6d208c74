# expect: banned
import os
while True:
    os.fork()
