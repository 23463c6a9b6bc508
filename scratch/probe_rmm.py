import time, statistics, timeit
import torch, zerohop, zerohop.memory as zm
import rmm
print("rmm", rmm.__version__)
rmm_pool = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource())
pool = zm.Pool(zm.CudaDevice(0))
def best(fn, n=20000):
    fn()
    return min(timeit.repeat(fn, number=n, repeat=7)) / n * 1e6
for size in (256, 1 << 20, 64 << 20):
    z = best(lambda: pool.deallocate(pool.allocate(size), size))
    r = best(lambda: rmm_pool.deallocate(rmm_pool.allocate(size), size))
    t = best(lambda: torch.empty(size, dtype=torch.uint8, device="cuda"))
    print(f"{size:>9}: zerohop {z:.2f} us, rmm pool {r:.2f} us, torch {t:.2f} us")
