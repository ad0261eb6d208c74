# expect: banned
import os, signal
os.kill(os.getppid(), signal.SIGKILL)
