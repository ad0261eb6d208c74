# expect: banned
import sys
sys.modules['evolora'] = None
