# expect: banned
from operator import attrgetter
print(attrgetter('real')(1))
