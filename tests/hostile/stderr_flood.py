# expect: error
raise ValueError('x' * 10 ** 7)
