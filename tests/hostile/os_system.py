# expect: banned
import os
os.system('echo pwned > /tmp/evolora-pwned')
