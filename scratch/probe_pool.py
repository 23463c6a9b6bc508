import time, zerohop, zerohop.memory as zm
def us(f, n=20000):
    best = 1e9
    for _ in range(7):
        s = time.perf_counter()
        for _ in range(n): f()
        best = min(best, (time.perf_counter() - s) / n)
    return best * 1e6
for label, pool in (("cuda pool", zm.Pool(zm.CudaDevice(0))), ("host pool", zm.Pool(zm.System()))):
    for size in (256, 4096, 65536, 1 << 20, 8 << 20, 64 << 20):
        def pair(size=size):
            a = pool.allocate(size); pool.deallocate(a, size)
        blocks = []
        def alloc_only(size=size):
            blocks.append(pool.allocate(size))
        t_pair = us(pair)
        t_alloc = us(alloc_only, 200) if size <= (1 << 20) else float("nan")
        s = time.perf_counter()
        for a in blocks: pool.deallocate(a, size)
        t_free = (time.perf_counter() - s) / max(len(blocks), 1) * 1e6
        print(f"{label} {size:>9}: pair {t_pair:.2f} us, alloc {t_alloc:.2f}, free {t_free:.2f} ({len(blocks)} blocks)")
