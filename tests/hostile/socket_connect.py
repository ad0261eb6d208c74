# expect: banned
import socket
s = socket.create_connection(('1.1.1.1', 80), timeout=1)
s.sendall(b'pwned')
