# expect: banned
with open('../../sentinel.txt', 'w') as f:
    f.write('pwned')
