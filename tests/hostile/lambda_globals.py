# expect: banned
print((lambda: 0).__globals__)
