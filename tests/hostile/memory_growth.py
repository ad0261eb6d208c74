# expect: memory
b = bytearray()
while True:
    b.extend(bytes(10 ** 6))
