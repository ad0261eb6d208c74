# expect: output_limit
print('\U0001F600' * 10 ** 6)
