# expect: banned
import _thread
_thread.start_new_thread(print, ('pwned',))
