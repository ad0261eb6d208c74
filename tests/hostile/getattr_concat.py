# expect: banned
getattr(__builtins__, 'ev' + 'al')('1')
