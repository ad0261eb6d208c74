# expect: banned
import sys
sys.setrecursionlimit(10 ** 9)
def f(n):
    return f(n + 1)
f(0)
