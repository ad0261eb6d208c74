# expect: timeout
try:
    while True:
        pass
finally:
    while True:
        pass
