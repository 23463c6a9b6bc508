"""Where a CUDA IPC consumer's time goes, zerohop against torch.multiprocessing: a 1 MiB tensor
(IPC_MIB=N: N MiB)
pickled 31 times by each (taking turns), and in the consumer process the median µs of each
phase: unpickling (zerohop maps the handle and queues the wait on the producer's event;
torch does the same and makes its tensor), zerohop's `__dlpack__` alone, `torch.from_dlpack`
(the view; torch's own tensor needs none; with IPC_SPLIT=1 its steps one by one), a write, the device synchronisation, and dropping
the objects (each closes its mapping there). Needs a GPU.

    python bench/ipc_cuda_phases.py
"""
import os
import pickle
import statistics
import time

import torch
import torch.multiprocessing as tmp

import zerohop

# IPC_SPLIT=1: time torch.from_dlpack's steps one by one in the consumer.
SPLIT = os.environ.get("IPC_SPLIT") == "1"
MIB = int(os.environ.get("IPC_MIB", "1"))


def consumer(conn):
    import torch.multiprocessing  # noqa: F401 - torch's reducers
    out = {}
    while True:
        msg = conn.recv_bytes()
        if msg == b"stop":
            break
        kind = msg[:8].decode().strip()
        data = msg[8:]
        t0 = time.perf_counter(); obj = pickle.loads(data); t1 = time.perf_counter()
        split = None
        if kind == "zerohop":
            cap = obj.__dlpack__(stream=1, max_version=(1, 0))
            del cap  # unconsumed: its deleter drops its reference now
            t2 = time.perf_counter()
            if SPLIT:
                # torch.from_dlpack's own steps, one by one.
                s0 = time.perf_counter(); dev = obj.__dlpack_device__()
                s1 = time.perf_counter(); stream = torch.cuda.current_stream(f"cuda:{dev[1]}")
                s2 = time.perf_counter(); cap = obj.__dlpack__(stream=1, max_version=(1, 0))
                s3 = time.perf_counter(); x = torch._C._from_dlpack(cap)
                s4 = time.perf_counter()
                split = (s1 - s0, s2 - s1, s3 - s2, s4 - s3)
                del stream, cap
            else:
                x = torch.from_dlpack(obj)
            t3 = time.perf_counter()
        elif kind == "zh-fw":
            # zerohop's own hand-over: torch's raw current stream (one C call), then a capsule.
            t2 = t1; x = obj.to_framework("torch"); t3 = time.perf_counter()
        elif kind == "zh-cai":
            # The other standard view: torch.as_tensor reads __cuda_array_interface__ (v3, with
            # the stream), no Python-level stream lookup.
            t2 = t1
            if SPLIT:
                s0 = time.perf_counter(); cai = obj.__cuda_array_interface__
                s1 = time.perf_counter(); x = torch.as_tensor(obj, device="cuda")
                s2 = time.perf_counter()
                out.setdefault("cai-split", []).append((s1 - s0, s2 - s1))
                del cai
            else:
                x = torch.as_tensor(obj, device="cuda")
            t3 = time.perf_counter()
        else:
            t2 = t1; x = obj; t3 = time.perf_counter()
        x[0] += 1; t4 = time.perf_counter()
        torch.cuda.synchronize(); t5 = time.perf_counter()
        del x, obj
        t6 = time.perf_counter()
        out.setdefault(kind, []).append((t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5))
        if split:
            out.setdefault("split", []).append(split)
        conn.send_bytes(b"ok")
    conn.send(out)

def main():
    ctx = tmp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=consumer, args=(child,), daemon=True); p.start()
    t = torch.zeros(MIB << 18, device="cuda"); torch.cuda.synchronize()
    print(f"{MIB} MiB, median of 30 hand-offs, µs")
    z = zerohop.from_dlpack(t)
    from multiprocessing.reduction import ForkingPickler
    pickling = {"zerohop": [], "zh-cai": [], "zh-fw": [], "torch": []}
    for _ in range(31):
        for kind, obj in (("zerohop", z), ("zh-cai", z), ("zh-fw", z), ("torch", t)):
            begun = time.perf_counter()
            if kind == "torch":
                data = bytes(ForkingPickler.dumps(obj))
            else:
                data = pickle.dumps(obj, protocol=5)
            pickling[kind].append(time.perf_counter() - begun)
            parent.send_bytes(kind.ljust(8).encode() + data); parent.recv_bytes()
    parent.send_bytes(b"stop"); out = parent.recv(); p.join()
    names = ["unpickle", "__dlpack__", "view (zerohop: torch.from_dlpack; zh-cai: "
             "torch.as_tensor; zh-fw: Tensor.to_framework)", "x[0] += 1", "synchronize", "del"]
    split = out.pop("split", None)
    cai_split = out.pop("cai-split", None)
    for kind, rows in out.items():
        med = [statistics.median(r[i] for r in rows[1:]) * 1e6 for i in range(6)]
        print(kind, f"producer: pickle {statistics.median(pickling[kind][1:]) * 1e6:.1f};",
              "consumer:", " ".join(f"{n} {m:.1f}" for n, m in zip(names, med)))
    if split:
        parts = ["__dlpack_device__", "torch.cuda.current_stream", "__dlpack__",
                 "torch._C._from_dlpack"]
        print("zerohop torch.from_dlpack, step by step:",
              " ".join(f"{n} {statistics.median(r[i] for r in split[1:]) * 1e6:.1f}"
                       for i, n in enumerate(parts)))
    if cai_split:
        print("zerohop torch.as_tensor, step by step: __cuda_array_interface__",
              f"{statistics.median(r[0] for r in cai_split[1:]) * 1e6:.1f}",
              f"torch.as_tensor (reading it again) {statistics.median(r[1] for r in cai_split[1:]) * 1e6:.1f}")
    # In process, for comparison.
    for _ in range(3): torch.from_dlpack(zerohop.from_dlpack(t))
    ts = []
    for _ in range(21):
        a = time.perf_counter(); torch.from_dlpack(z); ts.append(time.perf_counter() - a)
    print("in process torch.from_dlpack(zerohop)", f"{statistics.median(ts)*1e6:.1f}")

if __name__ == "__main__":
    main()
