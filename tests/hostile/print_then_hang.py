# expect: timeout
print('partial answer')
while True:
    pass
