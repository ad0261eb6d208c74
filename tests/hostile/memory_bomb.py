# expect: memory
blocks = []
while True:
    blocks.append(bytearray(50 * 1024 * 1024))
