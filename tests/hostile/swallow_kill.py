# expect: timeout
# Catching every exception must not keep the program alive past the wall-clock limit.
while True:
    try:
        while True:
            pass
    except BaseException:
        pass
