# expect: ok
import math
from fractions import Fraction
print(math.comb(10, 3) + Fraction(1, 2))
