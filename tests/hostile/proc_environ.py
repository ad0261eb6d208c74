# expect: banned
print(open('/proc/self/environ', 'rb').read())
