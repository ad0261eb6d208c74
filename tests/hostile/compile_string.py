# expect: banned
code = compile('print(1)', 'x', 'exec')
