# expect: banned
import subprocess
subprocess.run(['sh', '-c', 'echo pwned > /tmp/evolora-pwned'])
