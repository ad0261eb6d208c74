# expect: banned
import multiprocessing
while True:
    multiprocessing.Process(target=print).start()
