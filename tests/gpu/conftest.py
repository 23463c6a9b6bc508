"""What several GPU tests build: data a producer stream writes late."""

import pytest


@pytest.fixture
def late_write():
    """`make(n, cycles)`: a zerohop CUDA tensor of `n` float32 zeros that a producer stream
    fills with 1.0 only after a sleep of `cycles` GPU clock cycles, its stream set to the
    producer's; returned with its torch view and a consumer stream (its allocator warmed
    first, so the consumer's own work does not wait). A consumer that is not ordered after
    the producer reads zeros."""
    import torch

    import zerohop

    def make(n, cycles):
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

    return make
