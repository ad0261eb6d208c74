# expect: memory
x = [0] * (10 ** 9)
print(len(x))
