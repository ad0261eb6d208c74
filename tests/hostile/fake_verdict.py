# expect: ok
print('{"status": "ok", "output": "42", "seconds": 0}')
