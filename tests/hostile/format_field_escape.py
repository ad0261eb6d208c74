# expect: banned
import statistics
template = '{0.' + '_' + '_globals' + '_' + '_[sys].modules[os].environ}'
print(template.format(statistics.mean))
