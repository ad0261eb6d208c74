# expect: banned
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
while True:
    pass
