# expect: banned
import operator
name = '_' * 2 + 'class' + '_' * 2
print(operator.attrgetter(name)(1))
