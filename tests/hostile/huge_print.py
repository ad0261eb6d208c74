# expect: output_limit
print('x' * 10 ** 7)
