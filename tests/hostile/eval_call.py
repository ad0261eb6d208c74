# expect: banned
eval('1')
