# expect: banned
import random
print(random.random())
