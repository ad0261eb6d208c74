# expect: banned
import urllib.request
print(urllib.request.urlopen('http://example.com').read())
