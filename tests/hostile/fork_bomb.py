# expect: banned
# (a single fork: the import alone must be refused)
import os
os.fork()
