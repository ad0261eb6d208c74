# expect: banned
import statistics
print('{0.sys.modules}'.format(statistics))
