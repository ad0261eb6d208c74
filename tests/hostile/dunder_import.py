# expect: banned
__import__('os').system('echo pwned')
