"""A table's columns as their float32 bits, read from the host or the device: how the GPU
readers' tests compare a device reader's table with the host reader's, bit for bit."""

import numpy as np


def column_bits(table, device, torch):
    """{name: uint32 bits} of every column of `table`, which lives on `device` ("cpu" or
    "cuda:N"; device columns are checked to be there and copied back through torch)."""
    bits = {}
    for name in table.columns:
        column = table[name]
        if device == "cpu":
            values = np.from_dlpack(column)
        else:
            assert column.__dlpack_device__() == (2, int(device.split(":")[1])), name
            values = torch.from_dlpack(column).cpu().numpy()
        bits[name] = values.view(np.uint32).copy()
    return bits
