# expect: banned
import threading
for _ in range(1000):
    threading.Thread(target=lambda: None).start()
