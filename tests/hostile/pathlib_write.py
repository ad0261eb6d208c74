# expect: banned
import pathlib
pathlib.Path('/tmp/evolora-pwned').write_text('pwned')
