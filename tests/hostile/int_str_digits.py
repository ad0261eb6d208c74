# expect: error
print(10 ** 100000)
