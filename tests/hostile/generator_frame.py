# expect: banned
def g():
    yield 1
it = g()
print(it.gi_frame.f_back.f_globals)
