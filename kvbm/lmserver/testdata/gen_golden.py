# Writes the golden frames of docs/reference.md §9.4 with Python's struct module, the
# packing LMCache's lmcache/v1/protocol.py uses: native layout, i.e. little-endian int32
# with no padding; the key right-padded with spaces to 150 bytes.
# Run from this directory: python3 gen_golden.py
import struct

KEY = b"meta-llama/Llama-3.1-8B@1@0@1a2b3c4d5e6f7081@bfloat16"
CHUNK = 2 * 32 * 256 * 1024 * 2  # bf16 [2,32,256,1024]: 32 MiB

frames = {
    # request headers: command, length, fmt, dtype, location, shape0..3, key
    "exist_request.bin": struct.pack("iiiiiiiii150s", 3, 0, 1, 2, 0, 0, 0, 0, 0, KEY.ljust(150)),
    "put_request.bin": struct.pack("iiiiiiiii150s", 1, CHUNK, 1, 3, 0, 2, 32, 256, 1024, KEY.ljust(150)),
    "get_request.bin": struct.pack("iiiiiiiii150s", 2, 0, 1, 2, 0, 0, 0, 0, 0, KEY.ljust(150)),
    # reply headers: code, length, fmt, dtype, shape0..3, location
    "exist_reply.bin": struct.pack("iiiiiiiii", 200, 0, 1, 2, 0, 0, 0, 0, 0),
    "miss_reply.bin": struct.pack("iiiiiiiii", 400, 0, 1, 2, 0, 0, 0, 0, 0),
    "get_reply.bin": struct.pack("iiiiiiiii", 200, CHUNK, 1, 3, 2, 32, 256, 1024, 0),
    # the 2024 v0 header "ii150s": command, length, key (NUL-padded by struct)
    "v0_exist_request.bin": struct.pack("ii150s", 3, 0, KEY),
}
for name, b in frames.items():
    with open(name, "wb") as f:
        f.write(b)
    print(name, len(b))
