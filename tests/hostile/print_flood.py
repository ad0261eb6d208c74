# expect: output_limit
while True:
    print(12345678901234567890, end='')
