# expect: memory
s = 'a' * (10 ** 10)
print(len(s))
