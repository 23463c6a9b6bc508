"""What several GPU tests build: data a producer stream writes late. A module of its own (the
GPU suite runs from tests/gpu, where tests/conftest.py is not loaded, and a second conftest
module would shadow that one's helpers for the CPU tests)."""

import torch

import zerohop


def written_late(n, cycles):
    """A zerohop CUDA tensor of `n` float32 zeros that a producer stream fills with 1.0 only
    after a sleep of `cycles` GPU clock cycles, its stream set to the producer's; returned
    with its torch view and a consumer stream (its allocator warmed first, so the consumer's
    own work does not wait). A consumer not ordered after the producer reads zeros."""
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        torch.ones(n, device="cuda").sum().item()
    t = zerohop.zeros((n,), "float32", device="cuda:0")
    x = torch.from_dlpack(t)
    torch.cuda.synchronize()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(cycles)
        x.fill_(1.0)
    t.set_stream(producer.cuda_stream)
    return t, x, producer, consumer
