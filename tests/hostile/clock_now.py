# expect: banned
import datetime
print(datetime.datetime.now())
