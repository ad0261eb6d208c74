# expect: banned
import importlib
importlib.import_module('os').system('echo pwned')
