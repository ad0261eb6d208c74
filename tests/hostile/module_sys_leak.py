# expect: banned
import statistics
statistics.sys.modules['os'].system('echo pwned')
