# expect: error
x = []
for _ in range(10 ** 4):
    x = [x]
print(x)
