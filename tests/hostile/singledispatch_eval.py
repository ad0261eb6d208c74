# expect: banned
# runtime: banned
import functools
class C:
    x: 'op' + 'en("../../sentinel.txt", "w")'
functools.singledispatch(lambda a: 0).register(C())
