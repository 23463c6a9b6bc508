import time, torch, zerohop
import zerohop.cuda as zc
names = [f"c{k}" for k in range(64)]
t = zerohop.Table([(n, "float32") for n in names], 1000, device="cuda:0") if True else None
def us(f, n=2000):
    best = 1e9
    for _ in range(7):
        torch.cuda.synchronize(); s = time.perf_counter()
        for _ in range(n): f()
        best = min(best, (time.perf_counter() - s) / n)
    return best * 1e6
x = torch.empty(64, 1024, device="cuda")
print("zerohop tensors (map only) %.1f" % us(lambda: t.tensors(names)))
print("table.tensors torch %.1f" % us(lambda: t.tensors(names, "torch")))
print("torch unbind 64 cuda %.1f" % us(lambda: x.unbind(0)))
print("torch unbind 64 cuda sliced %.1f" % us(lambda: x[:, :1000].unbind(0)))
cols = [t[n] for n in names]
print("64 x torch.from_dlpack(zerohop col) %.1f" % us(lambda: [torch.from_dlpack(c) for c in cols], 200))
print("64 x to_framework %.1f" % us(lambda: [c.to_framework("torch") for c in cols], 200))
