# expect: banned
import sys
print('42')
sys.exit(0)
